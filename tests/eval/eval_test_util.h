// Shared helpers of the eval tests: fixture paths and a scratch directory.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/test_support.h"

namespace tandem::eval::test {

inline std::string fixtures() { return std::string(TANDEM_FIXTURES_DIR) + "/eval"; }
inline std::string tasks_dir() { return fixtures() + "/oe_eval_tasks"; }

inline std::string scratch_dir(const std::string& name) {
  return tandem::testing::temp_dir("eval_" + name);
}

inline void write_text(const std::string& path, const std::string& text) {
  tandem::testing::write_text(path, text);
}

}  // namespace tandem::eval::test
