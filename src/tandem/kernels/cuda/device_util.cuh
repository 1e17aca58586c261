// Device-side helpers shared by the .cu files (internal): element loads and stores for fp32 and
// bf16 storage, fixed-order warp and block reductions, launch sizes, the error word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tandem/kernels/cuda/launch.h"

namespace tandem::kernels::cuda::detail {

using bf16 = __nv_bfloat16;

// fp32 -> bf16 with the CPU backend's bits (core/bfloat16.h, kernels/cpu/bf16.h): round to nearest,
// ties to even, a carry into the exponent giving the correct result (up to infinity), and every
// NaN written as 0xFFFF, as torch's vectorised .to(torch.bfloat16) writes it. (The intrinsic
// __float2bfloat16_rn agrees on every non-NaN value but writes 0x7FFF for a NaN.)
__device__ __forceinline__ bf16 to_bf16(float v) {
  const unsigned bits = __float_as_uint(v);
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const unsigned rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return __ushort_as_bfloat16(static_cast<unsigned short>(nan ? 0xFFFFu : rounded));
}

__device__ __forceinline__ float load(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, i64 i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, i64 i, float v) { p[i] = v; }
// Each bf16 output is rounded once, from the fp32 result.
__device__ __forceinline__ void store(bf16* p, i64 i, float v) { p[i] = to_bf16(v); }

// dst[j] = src[i]: the same storage type is copied bit for bit (a bf16 NaN keeps its payload, as
// the CPU's memcpy does), an f32 source is rounded into a bf16 destination.
__device__ __forceinline__ void move(float* dst, i64 j, const float* src, i64 i) {
  dst[j] = src[i];
}
__device__ __forceinline__ void move(bf16* dst, i64 j, const bf16* src, i64 i) { dst[j] = src[i]; }
__device__ __forceinline__ void move(bf16* dst, i64 j, const float* src, i64 i) {
  dst[j] = to_bf16(src[i]);
}

// Butterfly sums and maxima: every lane ends with the same value, in the same order every run.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reduction over blockDim.x threads (a multiple of 32, at most 1024) through `scratch`
// (32 entries); every thread gets the result. Fixed tree: deterministic.
template <typename T, typename Op>
__device__ T block_reduce(T v, T* scratch, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // a previous reduction's result may still be being read
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? scratch[lane] : op.identity();
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
  __device__ double identity() const { return 0.0; }
};
struct SumF {
  __device__ float operator()(float a, float b) const { return a + b; }
  __device__ float identity() const { return 0.0f; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ float identity() const { return -__int_as_float(0x7f800000); }
};

// Records the first invalid index a kernel meets (integer atomics only: which one of several
// offenders is reported may vary, the outputs do not).
__device__ __forceinline__ void report(DeviceError* e, int code, long long value, long long where) {
  if (e != nullptr && atomicCAS(&e->code, 0, code) == 0) {
    e->value = value;
    e->where = where;
  }
}

// cp.async (sm_80+): 16 bytes from global to shared memory without passing through registers,
// zero-filled where `valid` is false (then nothing is read from `global`). The copies a thread
// issued since its last commit form one group; cp_async_wait<N>() returns once all but the newest
// N of its committed groups have landed, and a __syncthreads after it makes every thread's land
// for the block. In the CUDA emulator the copies land at that wait and not before (so a read
// that does not wait sees the old contents); nvcc's host pass never runs these.
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool valid) {
#ifdef __CUDA_ARCH__
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
#elif defined(TANDEM_CUDA_EMULATOR_DEVICE)
  ::cuda_emulator::cp_async(shared, global, 16, valid ? 16 : 0);
#endif
}
// The same for one 4- or 8-byte word (cp.async.ca: 16 bytes is the only size .cg takes).
template <int Bytes>
__device__ __forceinline__ void cp_async_word(void* shared, const void* global, bool valid) {
  static_assert(Bytes == 4 || Bytes == 8);
#ifdef __CUDA_ARCH__
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(global), "n"(Bytes),
               "r"(valid ? Bytes : 0)
               : "memory");
#elif defined(TANDEM_CUDA_EMULATOR_DEVICE)
  ::cuda_emulator::cp_async(shared, global, Bytes, valid ? Bytes : 0);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(TANDEM_CUDA_EMULATOR_DEVICE)
  ::cuda_emulator::cp_async_commit();
#endif
}
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#elif defined(TANDEM_CUDA_EMULATOR_DEVICE)
  ::cuda_emulator::cp_async_wait(Pending);
#endif
}

// A grid-stride loop's grid: enough blocks to fill the GPU, never more than the work needs.
inline unsigned grid_for(i64 n, int threads) {
  const i64 blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// Kernels needing more than the default 48 KB of dynamic shared memory must ask for it (`name`
// for the error where the device refuses).
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* name) {
  if (bytes > 48 * 1024)
    check_smem_request(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)),
                       name, bytes);
}

}  // namespace tandem::kernels::cuda::detail
