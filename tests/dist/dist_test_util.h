// Helpers for the data-parallel tests: run `tandem train` on the curve-parity fixture under
// mpirun (oversubscribed: this machine has fewer cores than ranks), read metrics.jsonl.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::dist_testing {

inline std::string fixture(const std::string& rel) {
  return std::string(TANDEM_FIXTURES_DIR) + "/" + rel;
}

inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tandem_dist_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The parity fixture with micro-batches of 2 instances, so that 4 ranks (2 instances each) run
// the same micro-batch shape as 1 rank (gradient accumulation over 4 micro-batches).
inline std::string train_args(const std::string& run, int steps) {
  return fixture("train/parity.yaml") + " trainer.init_from=" + fixture("train/init_hf") +
         " trainer.save_folder=" + run + " trainer.max_steps=" + std::to_string(steps) +
         " trainer.progress=false evaluation.interval=0 data.micro_batch_size=2";
}

// `tandem ARGS` on `world` ranks: W=1 runs the plain binary (single-process communicator).
inline std::string tandem_command(int world, const std::string& args, int threads = 1) {
  std::string env = "OMP_NUM_THREADS=" + std::to_string(threads) + " ";
  if (world == 1) return env + TANDEM_BINARY + " " + args;
  return env + "mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(world) + " " +
         TANDEM_BINARY + " " + args;
}

inline std::vector<nlohmann::json> read_metrics(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace tandem::dist_testing
