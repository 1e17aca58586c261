#include "tandem/dist/collective_watchdog.h"

#include <chrono>
#include <cstdlib>

#include "tandem/core/error.h"

namespace tandem::dist {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double dist_timeout_from_env() {
  const char* v = std::getenv("TANDEM_DIST_TIMEOUT_S");
  if (v == nullptr || *v == '\0') return 600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  TANDEM_CHECK(end != v && *end == '\0' && t > 0,
               "TANDEM_DIST_TIMEOUT_S={}: expected a positive number of seconds", v);
  return t;
}

CollectiveWatchdog::CollectiveWatchdog(Check check)
    : check_(std::move(check)), thread_([this] { watch(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() { stop(); }

void CollectiveWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_; })) {
    if (const std::int64_t since = since_ns_.load(); since != 0)
      check_(name_.load(), static_cast<double>(now_ns() - since) * 1e-9);
    else if (const std::int64_t queued = outstanding_since_ns_.load(); queued != 0)
      check_(outstanding_name_.load(), static_cast<double>(now_ns() - queued) * 1e-9);
  }
}

void CollectiveWatchdog::begin_outstanding(const char* what) {
  if (outstanding_since_ns_.load() != 0) return;
  outstanding_name_.store(what);
  outstanding_since_ns_.store(now_ns());
}

void CollectiveWatchdog::end_outstanding() { outstanding_since_ns_.store(0); }

CollectiveWatchdog::Scope::Scope(CollectiveWatchdog& watchdog, const char* collective)
    : watchdog_(watchdog) {
  watchdog_.name_.store(collective);
  watchdog_.awaited_.store(kAwaitingAny);
  watchdog_.since_ns_.store(now_ns());
}

CollectiveWatchdog::Scope::~Scope() {
  watchdog_.total_ns_ += now_ns() - watchdog_.since_ns_.load();
  watchdog_.since_ns_.store(0);
}

}  // namespace tandem::dist
