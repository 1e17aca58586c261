// 16-byte global memory accesses for the bandwidth-bound kernels (internal): one vector load or
// store moves 8 bf16 or 4 fp32 where an element-wise loop moves one, so a warp's request is 512
// bytes instead of 64 (bf16) or 128 (fp32) and far fewer instructions are issued per byte. The
// arithmetic is unchanged: every element is computed as the element-wise loop computes it, from
// the same floats, and rounded once on its way out (detail::to_bf16).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda::detail {

// Sixteen bytes: one vector load or store.
struct alignas(16) Pack {
  unsigned w[4];
};
__device__ __forceinline__ Pack load_pack(const void* p) {
#ifdef __CUDA_ARCH__
  return *static_cast<const Pack*>(p);
#else
  Pack v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}
__device__ __forceinline__ void store_pack(void* p, const Pack& v) {
#ifdef __CUDA_ARCH__
  *static_cast<Pack*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// Elements per pack of the element-wise kernels: 8 (16 bytes of bf16, 32 of fp32), so that
// kernels mixing the two types (the casts) move whole packs of both.
constexpr int kPackElems = 8;

// W consecutive elements as floats: W = kPackElems in 16-byte accesses (p + i 16-byte aligned),
// W = 1 one element (device_util.cuh's load and store).
template <int W>
struct Floats {
  float v[W];
};

template <int W>
__device__ __forceinline__ Floats<W> load_floats(const float* p, i64 i) {
  Floats<W> f;
  if constexpr (W == 1) {
    f.v[0] = load(p, i);
  } else {
    static_assert(W % 4 == 0);
#pragma unroll
    for (int k = 0; k < W / 4; ++k) {
      const Pack q = load_pack(p + i + 4 * k);
#pragma unroll
      for (int e = 0; e < 4; ++e) f.v[4 * k + e] = __uint_as_float(q.w[e]);
    }
  }
  return f;
}
template <int W>
__device__ __forceinline__ Floats<W> load_floats(const bf16* p, i64 i) {
  Floats<W> f;
  if constexpr (W == 1) {
    f.v[0] = load(p, i);
  } else {
    static_assert(W % 8 == 0);
#pragma unroll
    for (int k = 0; k < W / 8; ++k) {
      const Pack q = load_pack(p + i + 8 * k);
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // a bf16 is the high half of the fp32 it widens to
        f.v[8 * k + 2 * e] = __uint_as_float(q.w[e] << 16);
        f.v[8 * k + 2 * e + 1] = __uint_as_float(q.w[e] & 0xFFFF0000u);
      }
    }
  }
  return f;
}

template <int W>
__device__ __forceinline__ void store_floats(float* p, i64 i, const Floats<W>& f) {
  if constexpr (W == 1) {
    store(p, i, f.v[0]);
  } else {
#pragma unroll
    for (int k = 0; k < W / 4; ++k) {
      Pack q;
#pragma unroll
      for (int e = 0; e < 4; ++e) q.w[e] = __float_as_uint(f.v[4 * k + e]);
      store_pack(p + i + 4 * k, q);
    }
  }
}
template <int W>
__device__ __forceinline__ void store_floats(bf16* p, i64 i, const Floats<W>& f) {
  if constexpr (W == 1) {
    store(p, i, f.v[0]);
  } else {
#pragma unroll
    for (int k = 0; k < W / 8; ++k) {
      Pack q;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const unsigned lo = __bfloat16_as_ushort(to_bf16(f.v[8 * k + 2 * e]));
        const unsigned hi = __bfloat16_as_ushort(to_bf16(f.v[8 * k + 2 * e + 1]));
        q.w[e] = lo | hi << 16;
      }
      store_pack(p + i + 8 * k, q);
    }
  }
}

// Calls op(i, std::integral_constant<int, W>) over [0, n) in a grid-stride loop: packs of
// kPackElems elements where `packed` (every operand 16-byte aligned: packed_operands), then the
// elements past the last whole pack (all of them where not packed) one at a time. Each element is
// visited exactly once, by one thread.
template <typename Op>
__device__ __forceinline__ void for_each_pack(i64 n, bool packed, Op&& op) {
  const i64 first = blockIdx.x * i64{blockDim.x} + threadIdx.x;
  const i64 stride = i64{gridDim.x} * blockDim.x;
  const i64 packs = packed ? n / kPackElems : 0;
  for (i64 k = first; k < packs; k += stride)
    op(k * kPackElems, std::integral_constant<int, kPackElems>{});
  for (i64 i = packs * kPackElems + first; i < n; i += stride)
    op(i, std::integral_constant<int, 1>{});
}

// Whether every operand starts 16-byte aligned (the caching allocator's blocks do; a view at an
// odd offset need not), and the grid of a for_each_pack over n elements.
inline bool packed_operands(std::initializer_list<const void*> operands) {
  for (const void* p : operands)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}
inline unsigned grid_for_packs(i64 n, bool packed, int threads) {
  return grid_for(packed ? (n + kPackElems - 1) / kPackElems : n, threads);
}

}  // namespace tandem::kernels::cuda::detail
