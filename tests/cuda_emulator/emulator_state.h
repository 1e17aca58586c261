// Internal to the CUDA emulator: what its parts (scheduler, runtime, streams, cuBLASLt, NCCL) ask
// of each other.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "cuda_emulator_device.h"

namespace cuda_emulator::detail {

// cudaSuccess, or the error a GPU gives for this launch (block or grid out of range, more threads
// than the kernel's __launch_bounds__, more dynamic shared memory than the kernel may use, a stream
// that does not exist).
cudaError_t check_launch(const LaunchConfig& config, unsigned max_threads, const void* address);
void set_last_error(cudaError_t error);
// True when [p, p + bytes) lies inside one live device allocation.
bool device_range(const void* p, std::size_t bytes);
// Opens device memory to the host's threads while queued device work runs, and closes it again:
// outside device work, a host access of device memory faults, as on a GPU.
void open_device_memory(bool open);
// True when [p, p + bytes) lies inside one allocation of cudaMallocHost (page-locked memory).
bool pinned_range(const void* p, std::size_t bytes);

// Streams (streams.cc). Work queued on a stream runs when the host synchronises with it, after the
// work CUDA orders it behind; `before_return` runs it (and what it follows) before enqueue returns,
// for the calls CUDA documents as synchronous with the host.
using Work = std::function<void()>;
enum class Completion { when_synchronised, before_return };
cudaError_t enqueue(cudaStream_t stream, Work work,
                    Completion completion = Completion::when_synchronised);
bool stream_exists(cudaStream_t stream);
// Runs the queued work of every stream (as cudaDeviceSynchronize).
void run_all_work();

}  // namespace cuda_emulator::detail
