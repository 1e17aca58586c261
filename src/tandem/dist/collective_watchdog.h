// A guard against hung peers for any communicator: the communicator marks each collective as in
// progress (CollectiveWatchdog::Scope), and a background thread checks every 100 ms how long the
// current one has waited, handing that to the communicator's `check`, which ends the process
// when it decides the job is stuck (after TANDEM_DIST_TIMEOUT_S, or on a backend's own error).
// It also sums the time spent inside collectives, for the communication share, and holds which
// peer the collective is waiting for (set by the communicator), so that messages can name it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace tandem::dist {

// TANDEM_DIST_TIMEOUT_S (default 600 s); throws Error on a value that is not a positive number.
double dist_timeout_from_env();

class CollectiveWatchdog {
 public:
  // Runs on the watchdog thread while a collective is in progress; it may end the process.
  using Check = std::function<void(const char* collective, double waited_s)>;
  // awaited_rank(): the collective waits for every other rank (or the communicator cannot tell
  // which one it waits for).
  static constexpr int kAwaitingAny = -1;

  explicit CollectiveWatchdog(Check check);
  ~CollectiveWatchdog();  // stop()
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Ends the thread (idempotent); collectives after this are no longer watched.
  void stop();
  double seconds_in_collectives() const { return static_cast<double>(total_ns_) * 1e-9; }

  // The peer rank the current collective is waiting for (set by the communicator as it goes), or
  // kAwaitingAny; read by `check` on the watchdog thread.
  void await_rank(int rank) { awaited_.store(rank); }
  int awaited_rank() const { return awaited_.load(); }
  // Identifies the collective in progress (its start time), so `check` can act once per call.
  std::int64_t collective_id() const { return since_ns_.load(); }

  // Device collectives queued and not finished yet (NCCL's start_*_device until
  // finish_device_collectives): watched as a collective in progress from the first one queued,
  // because the host may wait for them anywhere once a device stream is ordered after them. A
  // Scope in progress takes precedence; neither nests. Not counted in seconds_in_collectives.
  void begin_outstanding(const char* what);  // no-op while already outstanding
  void end_outstanding();

  // Marks one collective (named by a string literal) as in progress for its lifetime.
  class Scope {
   public:
    Scope(CollectiveWatchdog& watchdog, const char* collective);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CollectiveWatchdog& watchdog_;
  };

 private:
  void watch();

  Check check_;
  std::atomic<std::int64_t> since_ns_{0};  // 0: not in a collective
  std::atomic<const char*> name_{""};
  std::atomic<std::int64_t> outstanding_since_ns_{0};  // 0: no device collective outstanding
  std::atomic<const char*> outstanding_name_{""};
  std::atomic<int> awaited_{kAwaitingAny};
  std::int64_t total_ns_ = 0;  // only the communicating thread updates it
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::dist
