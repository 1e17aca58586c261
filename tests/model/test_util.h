// Shared helpers for the model tests: fixture paths, temp dirs, running the CLI.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

namespace tandem::testing {

inline std::string fixture(const std::string& rel) {
  return std::string(TANDEM_FIXTURES_DIR) + "/" + rel;
}

// A fresh empty directory under the system temp dir, unique per test name.
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

// Runs the built `tandem` binary with the given argument string.
inline CommandResult run_tandem(const std::string& args) {
  std::string cmd = std::string(TANDEM_BINARY) + " " + args + " 2>&1";
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tandem::testing
