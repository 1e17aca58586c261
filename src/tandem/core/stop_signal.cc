#include "tandem/core/stop_signal.h"

#include <atomic>

namespace tandem::core {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

}  // namespace

int stop_signal_received() noexcept { return g_stop_signal.load(); }

bool record_stop_signal(int signal) noexcept {
  int expected = 0;
  return g_stop_signal.compare_exchange_strong(expected, signal);
}

}  // namespace tandem::core
