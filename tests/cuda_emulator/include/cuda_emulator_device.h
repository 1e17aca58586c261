// The device side of the CUDA emulator: what a translated .cu file (tests/cuda_emulator/
// translate_cu.py) needs beyond C++. Each CUDA thread of a block runs as a fiber on one CPU
// thread; a fiber gives way only at a barrier (__syncthreads, or a warp shuffle), so a block runs
// as the GPU's programming model allows, and a race that the model forbids (reading what another
// thread writes before a barrier orders it) reads stale data here instead of passing unnoticed.
// Barrier misuse that hangs or is undefined on a GPU (a shuffle naming an exited or absent lane,
// a warp split between a shuffle and __syncthreads) stops the process with a message.
#pragma once

#include <math.h>  // nvcc's headers put expf, fmaxf, log, ... in the global namespace

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// translate_cu.py rewrites every __shared__ declaration of a .cu file (static_shared and
// dynamic_shared below); one left over (in a header, which is not translated) fails to compile
// here.
#define __shared__ __shared___declarations_belong_in_a_translated_cu_file
#define __align__(n) alignas(n)

namespace cuda_emulator {

struct LaunchConfig {
  dim3 grid, block;
  std::size_t shared;
  cudaStream_t stream;
  LaunchConfig(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t st = nullptr)
      : grid(g), block(b), shared(s), stream(st) {}
};

namespace detail {
// The running thread's coordinates, set by the scheduler before it resumes a fiber.
struct Current {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned lane;
  void* shared;                // the block's dynamic shared memory
  std::size_t shared_bytes;    // and its size
  std::uint64_t block_serial;  // distinct for every block run on this CPU thread
  bool copies_land_at_issue;   // cp.async copies land when issued, not at their wait
};
extern thread_local Current t_current;
}  // namespace detail

void syncthreads();
// One warp shuffle of `bytes` (at most 8) bytes: this lane offers `in` and receives the value
// lane `src` offered.
void warp_exchange(unsigned mask, const void* in, void* out, std::size_t bytes, int src);

using Body = void (*)(void* frame);
// Queues body(frame) as every thread of the grid on the launch's stream, to run when the host
// synchronises with it; a launch the GPU would refuse sets the error that cudaGetLastError returns,
// and queues nothing.
void run_kernel(const LaunchConfig& config, unsigned max_threads, const void* address,
                const char* name, Body body, std::shared_ptr<void> frame);

template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(detail::t_current.shared);
}

// A static __shared__ variable: one per declaration (At, its place in its file) and type on each
// CPU thread, which runs one block at a time. Each block finds it full of all-ones bytes (NaN as
// floats), as a GPU's shared memory holds whatever was there, never what this kernel's previous
// block left: the first thread of a block to reach the declaration fills it, before any thread of
// the block can use it.
template <typename T, int At>
T& static_shared() {
  static thread_local T storage;
  static thread_local std::uint64_t filled_for = 0;
  if (filled_for != detail::t_current.block_serial) {
    std::memset(static_cast<void*>(&storage), 0xFF, sizeof storage);
    filled_for = detail::t_current.block_serial;
  }
  return storage;
}

// The order in which blocks and the threads of a block run. A correct kernel gives the same
// result in every order; one that reads what another thread or block writes without a barrier
// that orders them (a race on a GPU) reads garbage in one order or the other. forward: blocks and
// threads in index order; reverse: both reversed; mixed (the default, and what
// TANDEM_CUDA_EMULATOR_ORDER=forward|reverse|mixed overrides): every other launch runs its blocks
// in reverse, and every other block (alternating with the launch) its threads; and every other
// pair of blocks runs its warps one at a time from one __syncthreads to the next (otherwise they
// advance together, shuffle by shuffle), and in every other four blocks cp.async copies land as
// soon as they are issued instead of at their wait.
enum class Order { forward, reverse, mixed };
void set_order(Order order);
Order order();

// The arguments are evaluated once, when the kernel is launched (they are kept until it runs); each
// thread calls the kernel with its own copies of them.
template <typename F, typename... A>
void launch(const LaunchConfig& config, unsigned max_threads, const void* address, const char* name,
            F kernel, A&&... args) {
  struct Frame {
    F kernel;
    std::tuple<std::decay_t<A>...> args;
  };
  auto frame = std::make_shared<Frame>(
      Frame{kernel, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)});
  run_kernel(
      config, max_threads, address, name,
      [](void* p) {
        auto* f = static_cast<Frame*>(p);
        std::apply(f->kernel, f->args);
      },
      std::move(frame));
}

template <typename T>
T shuffle(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  T out;
  warp_exchange(mask, &v, &out, sizeof(T), src);
  return out;
}

[[noreturn]] void fail(const char* what);

// What a shared-memory-only instruction (ldmatrix) asks of an address: `bytes` inside the block's
// dynamic shared memory, starting at a multiple of `align`.
inline void require_shared(const void* p, std::size_t bytes, std::size_t align, const char* what) {
  const auto* base = static_cast<const unsigned char*>(detail::t_current.shared);
  const auto* at = static_cast<const unsigned char*>(p);
  if (base == nullptr || at < base || at + bytes > base + detail::t_current.shared_bytes)
    fail((std::string(what) + ": an address outside the block's dynamic shared memory").c_str());
  if (reinterpret_cast<std::uintptr_t>(p) % align != 0)
    fail((std::string(what) + ": a misaligned shared-memory address").c_str());
}

// cp.async, the asynchronous global -> shared copy (cp.async.cg with a source size: the bytes past
// it are zero-filled). On a GPU a copy lands at some point between its issue and the wait for its
// group (cp.async.wait_group); the emulator takes the two ends. Mostly a thread's copies land only
// at that wait, so that a kernel reading a tile before it waits for it, or before the barrier that
// follows the wait, reads what was there before. In some blocks (see Order) they land at issue, so
// that a kernel prefetching into a buffer that another warp may still be reading (no barrier
// between that warp's last read and the issue) overwrites it under the reader.
namespace detail {
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;
  unsigned bytes, src_bytes;
};
struct AsyncCopies {
  std::uint64_t block_serial = ~std::uint64_t{0};
  std::vector<std::vector<AsyncCopy>> groups;  // committed, oldest first
  std::vector<AsyncCopy> open;                 // not yet committed
};
inline void land(const AsyncCopy& c) {
  std::memcpy(c.dst, c.src, c.src_bytes);
  std::memset(c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
}
// The running thread's copies (the fibers of a block run on one CPU thread; a new block starts
// with none).
inline AsyncCopies& async_copies() {
  thread_local std::vector<AsyncCopies> per_thread;
  const Current& c = t_current;
  const std::size_t i = c.thread.x + c.block_dim.x * (c.thread.y + c.block_dim.y * c.thread.z);
  if (per_thread.size() <= i) per_thread.resize(i + 1);
  AsyncCopies& a = per_thread[i];
  if (a.block_serial != c.block_serial) {
    a = AsyncCopies{};
    a.block_serial = c.block_serial;
  }
  return a;
}
}  // namespace detail

inline void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  require_shared(dst, bytes, bytes, "cp.async");
  if (src_bytes > bytes) fail("cp.async: a source size larger than the copy");
  const detail::AsyncCopy c{static_cast<unsigned char*>(dst),
                            static_cast<const unsigned char*>(src), bytes, src_bytes};
  if (detail::t_current.copies_land_at_issue)
    detail::land(c);
  else
    detail::async_copies().open.push_back(c);
}
inline void cp_async_commit() {
  detail::AsyncCopies& a = detail::async_copies();
  a.groups.push_back(std::move(a.open));
  a.open.clear();
}
// Lands every committed group but the newest `pending` (cp.async.wait_group pending).
inline void cp_async_wait(unsigned pending) {
  detail::AsyncCopies& a = detail::async_copies();
  while (a.groups.size() > pending) {
    for (const detail::AsyncCopy& c : a.groups.front()) detail::land(c);
    a.groups.erase(a.groups.begin());
  }
}

}  // namespace cuda_emulator

// Device code that needs the emulator's own checks tests this.
#define TANDEM_CUDA_EMULATOR_DEVICE 1

#define threadIdx (::cuda_emulator::detail::t_current.thread)
#define blockIdx (::cuda_emulator::detail::t_current.block)
#define blockDim (::cuda_emulator::detail::t_current.block_dim)
#define gridDim (::cuda_emulator::detail::t_current.grid_dim)
#define warpSize 32

inline void __syncthreads() { ::cuda_emulator::syncthreads(); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  if (width != 32) ::cuda_emulator::fail("__shfl_sync with a width other than 32");
  return ::cuda_emulator::shuffle(mask, v, src_lane & 31);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  if (width != 32) ::cuda_emulator::fail("__shfl_xor_sync with a width other than 32");
  return ::cuda_emulator::shuffle(
      mask, v, static_cast<int>(::cuda_emulator::detail::t_current.lane) ^ (lane_mask & 31));
}
// The warp votes, over whole warps only, as five butterfly shuffles (so every lane must take
// part, as on a GPU).
inline int __all_sync(unsigned mask, int predicate) {
  if (mask != 0xffffffffu) ::cuda_emulator::fail("__all_sync over part of a warp (not emulated)");
  int all = predicate != 0;
  for (int offset = 1; offset < 32; offset *= 2) all &= __shfl_xor_sync(mask, all, offset);
  return all;
}
inline int __any_sync(unsigned mask, int predicate) {
  if (mask != 0xffffffffu) ::cuda_emulator::fail("__any_sync over part of a warp (not emulated)");
  int any = predicate != 0;
  for (int offset = 1; offset < 32; offset *= 2) any |= __shfl_xor_sync(mask, any, offset);
  return any;
}

inline int atomicCAS(int* address, int compare, int value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline int atomicAdd(int* address, int value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}

inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }

// The explicitly rounded intrinsics are single IEEE operations; the emulator's sources are compiled
// with -ffp-contract=off, so none of them is fused with a neighbour.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }
