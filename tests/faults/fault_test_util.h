// Helpers for the fault matrix: `tandem train` on the curve-parity fixture (a tiny model, a few
// hundred milliseconds a run) started, interrupted and resumed; an uninterrupted reference run
// to compare with bit for bit; damage applied to checkpoint files.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/hash.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/optimizer_shards.h"

namespace tandem::fault_testing {

namespace fs = std::filesystem;
using namespace core;
using namespace io;
using namespace train;
using testing::fixture;
using testing::run_shell;
using testing::run_tandem;
using testing::temp_dir;

// Saves every 2 steps keeping 2; a fixed MFU peak skips the GEMM measurement.
inline std::string train_args(const std::string& run, int steps) {
  return fixture("train/parity.yaml") + " trainer.init_from=" + fixture("train/init_hf") +
         " trainer.save_folder=" + run + " trainer.max_steps=" + std::to_string(steps) +
         " trainer.save_interval=2 trainer.keep_last=2 trainer.progress=false"
         " trainer.peak_tflops=0.001 evaluation.interval=4";
}

inline std::size_t metric_lines(const std::string& run) {
  std::error_code ec;
  if (!fs::exists(run + "/metrics.jsonl", ec)) return 0;
  std::ifstream in(run + "/metrics.jsonl");
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) n += !line.empty() && line.back() == '}';
  return n;
}

// `command` (a program and its arguments) in the background, output to `log`; the pid is the
// program's own (the shell execs it), for signals.
inline pid_t start_command(const std::string& command, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = "exec " + command + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

// `tandem train ARGS` in the background with `env` set, output to `log`.
inline pid_t start_train(const std::string& args, const std::string& log,
                         const std::string& env = "") {
  return start_command("env " + env + " " + std::string(TANDEM_BINARY) + " train " + args, log);
}

// Waits until the run has logged `lines` steps. False if the process ended first or did not get
// there within two minutes (it is then killed); either way it has been reaped, and its pid must
// not be signalled again.
inline bool wait_for_steps(pid_t pid, const std::string& run, std::size_t lines) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (metric_lines(run) < lines) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The exit status of a finished child as a shell would report it (128 + signal).
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// An uninterrupted run, made once per build of tandem by `command(dir)` and shared by the tests
// (a lock keeps two test processes from making it at the same time); `name` tells the commands
// apart.
inline std::string shared_reference_run(
    const std::string& name, const std::function<std::string(const std::string&)>& command) {
  const std::string binary_id = xxh64_file_hex(TANDEM_BINARY).substr(0, 12);
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_fault_reference_" + name + "_" + binary_id);
  const std::string lock_path = dir.string() + ".lock";
  // Closed (and so unlocked) however this returns: a failure that threw while the lock was held
  // used to leave it held, and the next test in this process then waited for itself forever.
  struct LockedFile {
    int fd;
    ~LockedFile() { ::close(fd); }
  } lock{::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)};
  EXPECT_GE(lock.fd, 0) << lock_path;
  ::flock(lock.fd, LOCK_EX);
  if (!fs::exists(dir / "done")) {
    fs::remove_all(dir);
    auto r = run_shell(command(dir.string()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    write_file_atomic((dir / "done").string(), "");
  }
  return dir.string();
}

// An uninterrupted single-process run of `steps` steps (train_args), shared by the tests.
inline std::string reference_run(int steps) {
  return shared_reference_run(std::to_string(steps), [steps](const std::string& dir) {
    return testing::tandem_binary() + " train " + train_args(dir, steps);
  });
}

// The two runs' checkpoints of `step` hold the same files under model/ and optim/ (weights,
// moments and their indices, whole or in shards), byte for byte.
inline void expect_same_weights_and_moments(const std::string& reference, const std::string& run,
                                            std::int64_t step) {
  const std::string cp = "/checkpoints/" + checkpoint_dir_name(step);
  auto listed = [&](const std::string& root) {
    std::vector<std::string> names;
    for (const char* part : {"model", "optim"})
      for (const auto& e : fs::directory_iterator(root + cp + "/" + part))
        names.push_back(std::string(part) + "/" + e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> names = listed(reference);
  ASSERT_EQ(names, listed(run)) << run;
  EXPECT_GE(names.size(), 4u);  // model.yaml, weights, optim/index.json, a moment shard at least
  for (const std::string& name : names)
    EXPECT_EQ(read_file(reference + cp + "/" + name), read_file(run + cp + "/" + name)) << name;
}

// `run` ended where `reference` did, bit for bit: every logged step's loss, z-loss, gradient
// norm, learning rate and token count, and the final weights and Adam moments.
inline void expect_bit_identical(const std::string& reference, const std::string& run,
                                 int final_step) {
  auto a = testing::read_metrics(reference + "/metrics.jsonl");
  auto b = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(a.size(), b.size()) << run;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"step", "tokens", "train/loss", "train/z_loss", "train/grad_norm", "lr",
                            "eval/heldout/loss"})
      EXPECT_EQ(a[i].value(key, nlohmann::json()), b[i].value(key, nlohmann::json()))
          << key << " at line " << i << " of " << run;
  expect_same_weights_and_moments(reference, run, final_step);
}

// Every checkpoint directory of the run verifies, and at least one exists.
inline void expect_checkpoints_intact(const std::string& run) {
  auto cps = list_checkpoints(run + "/checkpoints");
  EXPECT_FALSE(cps.empty()) << run;
  for (const auto& cp : cps) EXPECT_NO_THROW(verify_checkpoint(cp)) << cp;
}

// Flips one byte in the middle of a file (same size, so only the checksum can tell).
inline void flip_byte(const std::string& path) {
  std::string bytes = read_file(path);
  ASSERT_FALSE(bytes.empty()) << path;
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace tandem::fault_testing
