// Errors: one exception type that carries a message naming the file, tensor, key or line at fault.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tandem::core {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A device allocation the device had no room for: what a caller may answer with a smaller request
// or another algorithm (cuDNN's workspace, `--layers fit`), where any other error must propagate.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tandem::core

// Checks an invariant about inputs; on failure throws tandem::core::Error with the formatted
// message.
#define TANDEM_CHECK(cond, ...)          \
  do {                                   \
    if (!(cond)) {                       \
      ::tandem::core::fail(__VA_ARGS__); \
    }                                    \
  } while (0)
