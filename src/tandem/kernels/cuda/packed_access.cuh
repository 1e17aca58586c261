// 16-byte global memory accesses for the bandwidth-bound kernels (internal): one vector load or
// store moves 8 bf16 or 4 fp32 where an element-wise loop moves one, so a warp's request is 512
// bytes instead of 64 (bf16) or 128 (fp32) and far fewer instructions are issued per byte. The
// arithmetic is unchanged: every element is computed as the element-wise loop computes it, from
// the same floats, and rounded once on its way out (detail::to_bf16). Two shapes of loop: over a
// whole tensor (for_each_pack: the element-wise ops) and over one row by a block
// (for_each_group_in_row: RMSNorm, the cross-entropy rows), whose per-thread order of columns,
// and so whose row sums, do not depend on whether the accesses are packed.
#pragma once

#include <cstdint>
#include <cstdlib>
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

// Calls op(c, std::integral_constant<int, W>) over one row's columns [0, d) from each thread of
// the block: thread t takes the groups of kPackElems consecutive columns starting at kPackElems t,
// kPackElems (t + blockDim.x), ...; a whole group as one pack where `packed` (every row operand
// 16-byte aligned, d a multiple of kPackElems: packed_rows), else its columns one at a time in
// order (W = 1). Either way a thread sees the same columns in the same order, so a row sum
// (RMSNorm's, the cross-entropy's) has the same bits packed or not.
template <typename Op>
__device__ __forceinline__ void for_each_group_in_row(i64 d, bool packed, Op&& op) {
  for (i64 c = threadIdx.x * i64{kPackElems}; c < d; c += i64{blockDim.x} * kPackElems) {
    if (packed) {
      op(c, std::integral_constant<int, kPackElems>{});
    } else {
      const i64 end = c + kPackElems < d ? c + kPackElems : d;
      for (i64 e = c; e < end; ++e) op(e, std::integral_constant<int, 1>{});
    }
  }
}

// TANDEM_CUDA_PACKED_ACCESS=0 turns every 16-byte access off (each kernel then goes element by
// element): for the tests that compare the two, and for measuring what the packs bring.
inline bool packed_access_enabled() {
  const char* env = std::getenv("TANDEM_CUDA_PACKED_ACCESS");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

// Whether every operand starts 16-byte aligned (the caching allocator's blocks do; a view at an
// odd offset need not), and the grid of a for_each_pack over n elements.
inline bool packed_operands(std::initializer_list<const void*> operands) {
  if (!packed_access_enabled()) return false;
  for (const void* p : operands)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}
// Whether rows of d elements starting at these operands can go by whole packs
// (for_each_group_in_row): every operand aligned and every row a whole number of packs.
inline bool packed_rows(i64 d, std::initializer_list<const void*> operands) {
  return d % kPackElems == 0 && packed_operands(operands);
}
inline unsigned grid_for_packs(i64 n, bool packed, int threads) {
  return grid_for(packed ? (n + kPackElems - 1) / kPackElems : n, threads);
}

}  // namespace tandem::kernels::cuda::detail
