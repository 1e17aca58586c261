// Device memory for the CUDA backend: one caching allocator in front of cudaMalloc, so that the
// buffers a training step frees and asks for again (logits chunks, scratch, per-call outputs) are
// reused instead of going back to the driver. All work runs on one stream, so a block freed on
// the host can be handed out again at once: later kernels are ordered after earlier ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace tandem::kernels::cuda {

struct MemoryCounters {
  std::int64_t in_use = 0;  // bytes handed out (rounded sizes)
  std::int64_t peak_in_use = 0;
  std::int64_t reserved = 0;  // bytes obtained from cudaMalloc
  std::int64_t peak_reserved = 0;
  std::int64_t driver_allocations = 0;  // cudaMalloc calls that succeeded so far
  std::int64_t cache_releases = 0;      // times the cached blocks went back to the driver
};

class CachingAllocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned). When the device is full, the cached free
  // blocks are released and the allocation tried once more; then it throws naming the sizes.
  void* allocate(std::size_t bytes);
  // A block from the cache or the driver as allocate() gives it, or null where neither has room:
  // the cache is kept. For a caller with a smaller alternative (cuDNN's workspace in pieces), whom
  // a release on every call (a device synchronisation, then cudaMalloc again for every block the
  // cache held) would cost more than the alternative.
  void* try_allocate(std::size_t bytes);
  void free(void* p);
  // Returns every cached (free) block to the driver.
  void release_cached();
  const MemoryCounters& counters() const { return counters_; }
  void reset_peak() {
    counters_.peak_in_use = counters_.in_use;
    counters_.peak_reserved = counters_.reserved;
  }

  // Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above, and a cached block is
  // reused for a request that needs at least 3/4 of it (so little memory is wasted).
  static std::size_t round_size(std::size_t bytes);

 private:
  // A block for `bytes`, or null where the driver has no room (the cache released first and the
  // driver asked again when `release_when_full`); any other failure throws.
  void* take(std::size_t bytes, bool release_when_full);

  std::multimap<std::size_t, void*> free_blocks_;  // size -> block
  std::unordered_map<void*, std::size_t> live_;    // block -> size
  MemoryCounters counters_;
};

// A scratch block returned to the allocator when it goes out of scope (the stream's order keeps
// that safe while kernels still use it).
class Scratch {
 public:
  Scratch(CachingAllocator& memory, std::size_t bytes)
      : memory_(&memory), p_(bytes ? memory.allocate(bytes) : nullptr) {}
  ~Scratch() {
    if (p_) memory_->free(p_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  CachingAllocator* memory_;
  void* p_;
};

}  // namespace tandem::kernels::cuda
