#include "tandem/train/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "tandem/core/stop_signal.h"

namespace tandem::train {

namespace {

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  return set;
}

// A thread that was running before the mask was set may still take a signal; it only records it.
void on_stop_signal(int sig) { core::record_stop_signal(sig); }

// Ends the process by `sig` itself, so that the parent (a shell, mpirun) sees how it ended.
[[noreturn]] void die_by(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  pthread_kill(pthread_self(), sig);
  _exit(128 + sig);  // not reached
}

void wait_for_stop_signals() {
  // Named for /proc (and the test that checks the other threads' masks): while it waits, the
  // kernel shows the signals it waits for as unblocked in this thread.
  pthread_setname_np(pthread_self(), kSignalThreadName);
  const sigset_t set = stop_signal_set();
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (!core::record_stop_signal(sig)) {
      // Write, not stdio: the other threads may hold stdio's locks.
      const char msg[] = "second stop signal: stopping now, without a checkpoint\n";
      [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
      die_by(sig);
    }
  }
}

}  // namespace

void install_stop_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kStopSignals) std::signal(sig, on_stop_signal);
    std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit becomes a write error, not a crash
    const sigset_t set = stop_signal_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(wait_for_stop_signals).detach();
  });
}

}  // namespace tandem::train
