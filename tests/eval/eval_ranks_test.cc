// eval::EvalRanks in one process, with a communicator that stands for rank 1 of 3 and adds what
// the other two ranks would contribute: the rank runs its share of the batches only (k % 3 == 1),
// hands the others' places over as zeros, ends with every batch's values exactly and counts what
// ran (all ranks', its own); one process
// alone runs every batch in order; a batch that returns another number of values than announced
// is an error. (Across real ranks, with sharded models: tests/dist/eval_sharding_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "tandem/core/error.h"
#include "tandem/eval/eval_ranks.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

// Rank `rank` of `world`; all_reduce_sum(double) adds `others` (the other ranks' contributions)
// and records what this rank contributed. Every other collective is refused.
class StandInCommunicator final : public dist::Communicator {
 public:
  StandInCommunicator(int rank, int world, std::vector<double> others)
      : rank_(rank), world_(world), others_(std::move(others)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string name() const override { return "stand-in"; }
  void all_reduce_sum(double* data, std::size_t n) override {
    contributed.assign(data, data + n);
    ASSERT_EQ(n, others_.size());
    for (std::size_t i = 0; i < n; ++i) data[i] += others_[i];
    ++reductions;
  }
  void all_reduce_sum(float*, std::size_t) override { refuse(); }
  void reduce_scatter_sum(float*, const std::size_t*) override { refuse(); }
  void all_gather(float*, const std::size_t*) override { refuse(); }
  void broadcast(void*, std::size_t, int) override { refuse(); }
  void barrier() override { refuse(); }
  [[noreturn]] void abort(const std::string& message, int) override { core::fail("{}", message); }

  std::vector<double> contributed;
  int reductions = 0;

 private:
  [[noreturn]] static void refuse() { core::fail("stand-in communicator: unexpected collective"); }
  int rank_, world_;
  std::vector<double> others_;
};

model::ModelConfig config() {
  return model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 16, n_layers: 1, n_heads: 2, n_kv_heads: 1, hidden_size: 32, "
                 "vocab_size: 64, max_sequence_length: 32, sliding_window: {pattern: [-1]}}"),
      "model"));
}

// Batch k returns k + 1 values: 100 k + i (batch 0: one value, -0.5, to see signs survive).
std::vector<double> values_of(std::size_t k) {
  if (k == 0) return {-0.5};
  std::vector<double> v(k + 1);
  for (std::size_t i = 0; i <= k; ++i)
    v[i] = 100.0 * static_cast<double>(k) + static_cast<double>(i);
  return v;
}

std::vector<eval::EvalBatch> batches(std::size_t n) {
  std::vector<eval::EvalBatch> out;
  for (std::size_t k = 0; k < n; ++k) out.push_back({2, 8, k + 1});
  return out;
}

TEST(EvalRanks, EachRankRunsItsShareAndEndsWithEveryBatchExactly) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config(), *backend);
  const std::size_t n = 8;  // rounds of 3: rank 1 runs batches 1, 4 and 7
  // What ranks 0 and 2 put in: their batches' values, zeros elsewhere.
  std::vector<double> others;
  for (std::size_t k = 0; k < n; ++k) {
    for (double v : values_of(k)) others.push_back(k % 3 == 1 ? 0.0 : v);
  }
  StandInCommunicator comm(1, 3, others);
  std::vector<std::size_t> ran;
  const eval::EvalRanks ranks(comm);
  const auto results = ranks.run(m, batches(n), [&](std::size_t k) {
    ran.push_back(k);
    return values_of(k);
  });
  EXPECT_EQ(ranks.count().all, 8);
  EXPECT_EQ(ranks.count().here, 3);
  EXPECT_EQ(ran, (std::vector<std::size_t>{1, 4, 7}));
  ASSERT_EQ(comm.reductions, 1);
  std::size_t at = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::vector<double> expected = values_of(k);
    for (std::size_t i = 0; i < expected.size(); ++i, ++at)
      EXPECT_EQ(comm.contributed[at], k % 3 == 1 ? expected[i] : 0.0) << k << " " << i;
    EXPECT_EQ(results[k], expected) << k;
  }
  EXPECT_EQ(at, comm.contributed.size());
}

TEST(EvalRanks, OneProcessRunsEveryBatchInOrder) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config(), *backend);
  std::vector<std::size_t> ran;
  const eval::EvalRanks alone;
  const auto results = alone.run(m, batches(5), [&](std::size_t k) {
    ran.push_back(k);
    return values_of(k);
  });
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(alone.count().all, 5);
  EXPECT_EQ(alone.count().here, 5);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(results[k], values_of(k));
  // NaN and infinities pass through a sum with zeros unchanged.
  StandInCommunicator comm(0, 2, {0.0, 0.0, 0.0});
  const auto special = eval::EvalRanks(comm).run(m, {{1, 8, 3}}, [](std::size_t) {
    return std::vector<double>{std::nan(""), -std::numeric_limits<double>::infinity(), 1e-310};
  });
  EXPECT_TRUE(std::isnan(special[0][0]));
  EXPECT_EQ(special[0][1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(special[0][2], 1e-310);
}

TEST(EvalRanks, ABatchWithAnotherNumberOfValuesThanAnnouncedIsAnError) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config(), *backend);
  try {
    eval::EvalRanks().run(m, batches(2), [](std::size_t k) { return values_of(k + 1); });
    FAIL() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("evaluation batch 0: 2 results where 1 were announced"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem
