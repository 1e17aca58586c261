#include "tandem/core/process_memory.h"

#include <fstream>
#include <string>

namespace tandem::core {
namespace {

// The value of a "Key:   1234 kB" line of /proc/self/status, in bytes.
std::int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return 0;
}

}  // namespace

std::int64_t resident_bytes() { return status_kib("VmRSS"); }
std::int64_t peak_resident_bytes() { return status_kib("VmHWM"); }

}  // namespace tandem::core
