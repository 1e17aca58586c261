// Device-side helpers shared by the .cu files (internal): element loads and stores for fp32 and
// bf16 storage, fixed-order warp and block reductions, launch sizes, the error word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/kernels/cuda/launch.h"

namespace tandem::kernels::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, i64 i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, i64 i, float v) { p[i] = v; }
// Round to nearest even (NaN stays NaN), as torch's .to(torch.bfloat16).
__device__ __forceinline__ void store(bf16* p, i64 i, float v) { p[i] = __float2bfloat16_rn(v); }

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

// A grid-stride loop's grid: enough blocks to fill the GPU, never more than the work needs.
inline unsigned grid_for(i64 n, int threads) {
  const i64 blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace tandem::kernels::cuda::detail
