// Helpers shared by test folders: fixture paths, fresh temp dirs, running the built `tandem`
// binary (or a shell line), reading metrics.jsonl. Header-only: each test folder is its own
// executable and includes it as "../common/cli_test_util.h".
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::testing {

inline std::string fixture(const std::string& rel) {
  return std::string(TANDEM_FIXTURES_DIR) + "/" + rel;
}

// A fresh empty directory under the system temp dir, unique per name.
inline std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tandem_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
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

inline CommandResult run_tandem(const std::string& args) {
  return run_shell(std::string(TANDEM_BINARY) + " " + args);
}

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace tandem::testing
