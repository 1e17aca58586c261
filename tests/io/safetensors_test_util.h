// Helpers for the safetensors tests: fixture paths, scratch files, hand-made files and error
// checks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::testing {

inline std::string io_fixture(const std::string& name) {
  return std::string(TANDEM_FIXTURES_DIR) + "/io/" + name;
}

// A fresh directory per test (tests of one binary may run in parallel processes under CTest).
inline std::string scratch_dir() { return tandem::testing::temp_dir("st"); }

// Bytes of a safetensors file with the given header text and `data_bytes` bytes of data.
inline std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.append(data_bytes, '\x01');
  return out;
}

// Expects `action` to throw tandem::core::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& action,
                         std::initializer_list<std::string> parts) {
  try {
    action();
    ADD_FAILURE() << "expected a tandem::core::Error";
  } catch (const core::Error& e) {
    std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message lacks '" << part << "': " << message;
    }
  }
}

}  // namespace tandem::testing
