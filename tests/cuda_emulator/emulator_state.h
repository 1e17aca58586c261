// Internal to the CUDA emulator: what the scheduler asks of the runtime.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_emulator_device.h"

namespace cuda_emulator::detail {

// cudaSuccess, or the error a GPU gives for this launch (block or grid out of range, more threads
// than the kernel's __launch_bounds__, more dynamic shared memory than the kernel may use, a stream
// that does not exist).
cudaError_t check_launch(const LaunchConfig& config, unsigned max_threads, const void* address);
void set_last_error(cudaError_t error);
// True when [p, p + bytes) lies inside one live device allocation.
bool device_range(const void* p, std::size_t bytes);

}  // namespace cuda_emulator::detail
