// The stop signal (SIGINT, SIGTERM, SIGHUP or SIGUSR1) this process received, if any: recorded by
// the signal thread of `tandem train` (train/stop_signals.h), read by the training loop (save and
// stop at the next step boundary) and by the collective watchdog (dist/; a rank stuck in a
// collective then says whom it waited for). One record for both, async-signal-safe.
#pragma once

namespace tandem::core {

// The first stop signal received; 0: none yet.
int stop_signal_received() noexcept;
// Records `signal` unless one is recorded already; false then (a second signal).
bool record_stop_signal(int signal) noexcept;

}  // namespace tandem::core
