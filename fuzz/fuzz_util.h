// Shared by the fuzz targets: a scratch directory for inputs that tandem reads from files (one
// per process, in /dev/shm when there is one), and the rule every target enforces: a parser
// may reject its input only with tandem::Error. Any other exception (a library's, e.g.
// nlohmann's type_error or std::out_of_range) escapes the target and libFuzzer reports it as a
// crash, as it does a sanitizer finding, a stack overflow or a timeout.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tandem/core/error.h"

namespace tandem::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("tandem_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string scratch_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; a tandem::Error is an accepted way to refuse the input.
template <typename F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const core::Error&) {
  }
}

}  // namespace tandem::fuzz
