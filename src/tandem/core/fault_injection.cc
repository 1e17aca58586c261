#include "tandem/core/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

namespace tandem::core {
namespace {

struct FaultSpec {
  bool armed = false;
  std::string point;
  long nth = 1;
};

FaultSpec read_spec() {
  FaultSpec spec;
  const char* fault = std::getenv("TANDEM_FAULT");
  if (fault == nullptr || *fault == '\0') return spec;
  if (const char* want = std::getenv("TANDEM_FAULT_RANK")) {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (rank == nullptr) rank = std::getenv("PMI_RANK");
    if (std::string(rank ? rank : "0") != want) return spec;
  }
  std::string text(fault);
  auto colon = text.rfind(':');
  spec.point = text.substr(0, colon);
  if (colon != std::string::npos)
    spec.nth = std::max(1L, std::strtol(text.c_str() + colon + 1, nullptr, 10));
  spec.armed = true;
  return spec;
}

}  // namespace

void fault_point(const char* name) {
  static const FaultSpec spec = read_spec();
  if (!spec.armed) [[likely]]
    return;
  static std::atomic<long> hits{0};
  if (spec.point == name && ++hits == spec.nth) ::kill(::getpid(), SIGKILL);
}

}  // namespace tandem::core
