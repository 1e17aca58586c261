// Shared helpers of the eval tests: fixture paths and a scratch directory.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

namespace tandem::eval::test {

inline std::string fixtures() { return std::string(TANDEM_FIXTURES_DIR) + "/eval"; }
inline std::string tasks_dir() { return fixtures() + "/oe_eval_tasks"; }

inline std::string scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tandem_eval_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

}  // namespace tandem::eval::test
