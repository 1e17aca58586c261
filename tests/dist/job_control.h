// Background jobs for the fault tests: start a shell command with its output in a log file, wait
// (bounded) for its training steps or its end.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "dist_test_util.h"

namespace tandem::dist_testing {

// Starts `cmd` with its output in `log`; the child is the command itself (exec).
inline pid_t start_job(const std::string& cmd, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec env " + cmd + " > " + log + " 2>&1").c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

// Waits (at most `limit`) until the run's metrics log has `lines` entries; false if the job ended
// first or the time ran out.
inline bool wait_for_steps(pid_t job, const std::string& run, std::size_t lines,
                           std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (read_metrics(run).size() < lines) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (waitpid(job, nullptr, WNOHANG) == job) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Waits up to `limit` for the job to end; returns its seconds, or -1 (then kills it).
inline double wait_for_exit(pid_t job, int* status, std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  while (waitpid(job, status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > start + limit) {
      kill(job, SIGKILL);
      waitpid(job, status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tandem::dist_testing
