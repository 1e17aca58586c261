#include "tandem/dist/comm_thread.h"

#include <chrono>

namespace tandem::dist {

CommThread::CommThread() : thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CommThread::Ticket CommThread::submit(std::function<void()> task) {
  Ticket t;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    t = ++submitted_;
  }
  cv_.notify_all();
  return t;
}

double CommThread::wait(Ticket ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommThread::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    if (!error_) {  // after a failure the rest is skipped (the caller rethrows the first error)
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      ++completed_;
    }
    cv_.notify_all();
  }
}

}  // namespace tandem::dist
