// W ranks as W threads of one process, for tests of collective host-side logic without mpirun:
// ThreadRanks(3).run([](dist::Communicator& comm) { ... }) runs the body once per rank. The
// double all-reduce (summed in rank order), broadcast and barrier are real collectives among the
// threads; the others are refused. A rank whose body throws leaves the later collectives (the
// others then read its last contribution, not a freed buffer) and its exception is returned.
#pragma once

#include <barrier>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/dist/communicator.h"

namespace tandem::testing {

class ThreadRanks {
 public:
  explicit ThreadRanks(int world) : world_(world), sync_(world), slots_(world) {}

  // Runs `body` on every rank; returns each rank's exception message ("" where none).
  std::vector<std::string> run(const std::function<void(dist::Communicator&)>& body) {
    std::vector<std::string> errors(static_cast<std::size_t>(world_));
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r)
      threads.emplace_back([&, r] {
        Rank comm(*this, r);
        try {
          body(comm);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
          sync_.arrive_and_drop();
          return;
        }
        sync_.arrive_and_drop();
      });
    for (auto& t : threads) t.join();
    return errors;
  }

 private:
  class Rank final : public dist::Communicator {
   public:
    Rank(ThreadRanks& world, int rank) : w_(world), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return w_.world_; }
    std::string name() const override { return "threads"; }
    void all_reduce_sum(double* data, std::size_t n) override {
      std::vector<char>& mine = w_.slots_[static_cast<std::size_t>(rank_)];
      mine.assign(reinterpret_cast<const char*>(data),
                  reinterpret_cast<const char*>(data) + n * sizeof(double));
      w_.sync_.arrive_and_wait();
      std::vector<double> sum(n, 0.0);
      for (const std::vector<char>& slot : w_.slots_)
        for (std::size_t i = 0; i < n && (i + 1) * sizeof(double) <= slot.size(); ++i) {
          double v;
          std::memcpy(&v, slot.data() + i * sizeof(double), sizeof v);
          sum[i] += v;
        }
      w_.sync_.arrive_and_wait();
      std::memcpy(data, sum.data(), n * sizeof(double));
    }
    void broadcast(void* data, std::size_t bytes, int root) override {
      if (rank_ == root)
        w_.slots_[static_cast<std::size_t>(root)].assign(static_cast<const char*>(data),
                                                         static_cast<const char*>(data) + bytes);
      w_.sync_.arrive_and_wait();
      const std::vector<char>& slot = w_.slots_[static_cast<std::size_t>(root)];
      if (rank_ != root) std::memcpy(data, slot.data(), std::min(bytes, slot.size()));
      w_.sync_.arrive_and_wait();
    }
    void barrier() override { w_.sync_.arrive_and_wait(); }
    void all_reduce_sum(float*, std::size_t) override { refuse(); }
    void reduce_scatter_sum(float*, const std::size_t*) override { refuse(); }
    void all_gather(float*, const std::size_t*) override { refuse(); }
    [[noreturn]] void abort(const std::string& message, int) override { core::fail("{}", message); }

   private:
    [[noreturn]] static void refuse() { core::fail("thread ranks: unexpected collective"); }
    ThreadRanks& w_;
    int rank_;
  };

  int world_;
  std::barrier<> sync_;
  std::vector<std::vector<char>> slots_;
};

}  // namespace tandem::testing
