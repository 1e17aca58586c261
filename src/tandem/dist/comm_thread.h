// One thread that runs collectives (or anything) submitted by the calling thread, in submission
// order: FSDP's prefetch. Every rank submits the same collectives in the same order, so they
// match across ranks as if the calling thread ran them; the caller waits for a task before using
// its result, and drains the queue before it calls the communicator itself.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tandem::dist {

class CommThread {
 public:
  using Ticket = std::uint64_t;  // 0: nothing to wait for

  CommThread();
  ~CommThread();  // drains what was submitted, then ends the thread
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  Ticket submit(std::function<void()> task);
  // Blocks until task `ticket` (and every task before it) has run; rethrows the first error a
  // task raised. Returns the seconds spent waiting.
  double wait(Ticket ticket);
  double drain() { return wait(submitted_); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  Ticket submitted_ = 0, completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::dist
