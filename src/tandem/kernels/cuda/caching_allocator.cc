#include "tandem/kernels/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "tandem/core/error.h"

namespace tandem::kernels::cuda {
namespace {

constexpr std::size_t kSmall = std::size_t{1} << 20;
constexpr std::size_t kSmallGrain = 512;
constexpr std::size_t kLargeGrain = std::size_t{2} << 20;

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }
// A request's size in words: GiB from 1 GiB up, else MiB (a workspace of a few hundred KiB is not
// "0.001 GiB").
std::string amount(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 30)) return fmt::format("{:.3f} GiB", gib(bytes));
  return fmt::format("{:.3f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

// The error for a request of `size` bytes the driver refused with `rc`.
std::string cannot_allocate(std::size_t size, cudaError_t rc, const MemoryCounters& counters) {
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  return fmt::format(
      "cuda: cannot allocate {} of device memory ({}): {:.3f} GiB in use by tandem, "
      "{:.3f} GiB reserved, {:.3f} of {:.3f} GiB free on the device",
      amount(static_cast<std::int64_t>(size)), cudaGetErrorString(rc), gib(counters.in_use),
      gib(counters.reserved), gib(static_cast<std::int64_t>(free_bytes)),
      gib(static_cast<std::int64_t>(total_bytes)));
}

}  // namespace

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  const std::size_t grain = bytes < kSmall ? kSmallGrain : kLargeGrain;
  return (std::max<std::size_t>(bytes, 1) + grain - 1) / grain * grain;
}

CachingAllocator::~CachingAllocator() {
  // The device may already be gone at exit; nothing useful can be done about an error here.
  for (auto& [size, p] : free_blocks_) cudaFree(p);
  for (auto& [p, size] : live_) cudaFree(p);
}

void* CachingAllocator::take(std::size_t bytes, bool release_when_full) {
  const std::size_t size = round_size(bytes);
  auto it = free_blocks_.lower_bound(size);
  void* p = nullptr;
  std::size_t block = size;
  if (it != free_blocks_.end() && size >= it->first - it->first / 4) {
    block = it->first;
    p = it->second;
    free_blocks_.erase(it);
  } else {
    cudaError_t rc = cudaMalloc(&p, size);
    if (rc == cudaErrorMemoryAllocation && release_when_full && !free_blocks_.empty()) {
      cudaGetLastError();  // clear the sticky-free error state of the failed call
      release_cached();
      rc = cudaMalloc(&p, size);
    }
    if (rc != cudaSuccess) {
      cudaGetLastError();
      // Only the driver's "no room" is the caller's to answer; any other failure (a sticky error
      // from an earlier fault, a bad device) is an error to report, never a reason to fall back.
      if (rc == cudaErrorMemoryAllocation) return nullptr;
      throw core::Error(cannot_allocate(size, rc, counters_));
    }
    counters_.reserved += static_cast<std::int64_t>(size);
    counters_.peak_reserved = std::max(counters_.peak_reserved, counters_.reserved);
    ++counters_.driver_allocations;
  }
  live_.emplace(p, block);
  counters_.in_use += static_cast<std::int64_t>(block);
  counters_.peak_in_use = std::max(counters_.peak_in_use, counters_.in_use);
  return p;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  void* p = take(bytes, true);
  if (!p)
    throw core::OutOfMemory(
        cannot_allocate(round_size(bytes), cudaErrorMemoryAllocation, counters_));
  return p;
}

void* CachingAllocator::try_allocate(std::size_t bytes) { return take(bytes, false); }

void CachingAllocator::free(void* p) {
  auto it = live_.find(p);
  TANDEM_CHECK(it != live_.end(), "cuda: freeing memory the allocator did not hand out");
  counters_.in_use -= static_cast<std::int64_t>(it->second);
  free_blocks_.emplace(it->second, p);
  live_.erase(it);
}

void CachingAllocator::release_cached() {
  if (free_blocks_.empty()) return;
  // Queued kernels may still use a block that was freed on the host: wait for them first.
  cudaDeviceSynchronize();
  for (auto& [size, p] : free_blocks_) {
    cudaFree(p);
    counters_.reserved -= static_cast<std::int64_t>(size);
  }
  free_blocks_.clear();
  ++counters_.cache_releases;
}

}  // namespace tandem::kernels::cuda
