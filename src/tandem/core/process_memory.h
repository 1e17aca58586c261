// The process's resident memory as the kernel counts it (Linux /proc/self/status): now and its
// high-water mark. Measured memory for logs, benchmarks and the planner's checks.
#pragma once

#include <cstdint>

namespace tandem::core {

// VmRSS and VmHWM in bytes (0 where /proc is not available).
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();

}  // namespace tandem::core
