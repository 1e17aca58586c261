// SIGINT, SIGTERM, SIGHUP and SIGUSR1 during training: the loop saves a checkpoint at the next
// step boundary and stops (a second signal ends the process at once, without a checkpoint).
// SIGUSR1 is the one for runs under mpirun: mpirun passes it on to every rank and the job goes on,
// where on SIGTERM or SIGINT it ends the job itself (its ranks get SIGTERM, then SIGKILL). Slurm
// sends it ahead of a job's time limit when asked (sbatch --signal=B:USR1@SECONDS,
// docs/recipes.md).
//
// The signals are blocked in every compute thread and taken by one thread of their own
// (sigwait), never delivered asynchronously to a thread that computes. An asynchronous signal
// makes the kernel write its frame (registers and the AVX-512/AMX state, several KiB) below that
// thread's stack pointer, and oneDNN's JIT GEMM kernels point the stack pointer into a heap buffer
// while they run: a signal landing there overwrote heap memory (glibc then aborted with "corrupted
// size vs. prev_size", about one stop in a hundred under load; the frame was found in a core dump).
#pragma once

#include <array>
#include <csignal>

namespace tandem::train {

// The signals that stop a run, lowest number first.
inline constexpr std::array<int, 4> kStopSignals = {SIGHUP, SIGINT, SIGUSR1, SIGTERM};

// The name of the thread that takes the signals (/proc/PID/task/TID/comm).
inline constexpr const char* kSignalThreadName = "stop-signals";

// Blocks the stop signals in the calling thread, and so in every thread it starts afterwards
// (OpenMP's pool, the data loader, MPI's progress threads), and starts the thread that waits for
// them. Call it first, before anything starts a thread. Idempotent.
void install_stop_signal_handlers();

}  // namespace tandem::train
