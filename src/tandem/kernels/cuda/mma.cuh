// Warp-level bf16 tensor-core products (internal): one mma.sync m16n8k16 with fp32 accumulators,
// and loads of its operand fragments from row-major bf16 tiles in shared memory.
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16), with g = lane / 4
// and t = lane % 4; each 32-bit register holds two bf16, the lower-indexed one in its low half:
//   A (16 x 16, row major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8):             b[0] = B[2t, 2t+1][g],  b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, fp32):    c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// So an accumulator tile pair (16 x 16 of C) becomes an A fragment without moving between lanes:
// flash attention's P and dS feed the next product from the registers that computed them.
#pragma once

#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda::detail {

__device__ __forceinline__ unsigned pack_bf16(bf16 lo, bf16 hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(lo)) |
         (static_cast<unsigned>(__bfloat16_as_ushort(hi)) << 16);
}
// Two fp32 values rounded to bf16 and packed. On the GPU one cvt.rn.bf16x2 (its first source goes
// to the high half): round to nearest even like to_bf16, the backend's one rounding, and the same
// bits for every value but NaN, whose payload here is the canonical 0x7FFF. Elsewhere to_bf16.
__device__ __forceinline__ unsigned pack_f32(float lo, float hi) {
#ifdef __CUDA_ARCH__
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return pack_bf16(to_bf16(lo), to_bf16(hi));
#endif
}
__device__ __forceinline__ float low_f32(unsigned x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float high_f32(unsigned x) { return __uint_as_float(x & 0xFFFF0000u); }

// c += A * B. On the GPU one mma.sync; elsewhere (the CUDA emulator) the same product built from
// warp shuffles of the documented fragments, so a layout mistake in the callers shows there too.
__device__ __forceinline__ void mma_16x8x16(float c[4], const unsigned a[4], const unsigned b[2]) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int src = 0; src < 4; ++src) {  // the lanes holding k = 2 src, 2 src + 1, +8, +9
    const int a_lane = g * 4 + src;    // row g's (and g + 8's) values of those k
    const unsigned a0 = __shfl_sync(0xffffffffu, a[0], a_lane);
    const unsigned a1 = __shfl_sync(0xffffffffu, a[1], a_lane);
    const unsigned a2 = __shfl_sync(0xffffffffu, a[2], a_lane);
    const unsigned a3 = __shfl_sync(0xffffffffu, a[3], a_lane);
    for (int col = 0; col < 2; ++col) {
      const int b_lane = (2 * t + col) * 4 + src;  // column 2t + col's values of those k
      const unsigned b0 = __shfl_sync(0xffffffffu, b[0], b_lane);
      const unsigned b1 = __shfl_sync(0xffffffffu, b[1], b_lane);
      c[col] += low_f32(a0) * low_f32(b0) + high_f32(a0) * high_f32(b0) +
                low_f32(a2) * low_f32(b1) + high_f32(a2) * high_f32(b1);
      c[2 + col] += low_f32(a1) * low_f32(b0) + high_f32(a1) * high_f32(b0) +
                    low_f32(a3) * low_f32(b1) + high_f32(a3) * high_f32(b1);
    }
  }
#endif
}

// ldmatrix .x4 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lane l gives `row`, the
// address of row l % 8 of 8 x 8 matrix l / 8 (16 bytes of shared memory, 16-byte aligned), and
// register j of lane 4 r + w receives matrix j's elements [r][2w, 2w+1]; with .trans, its
// elements [2w][r] and [2w+1][r] (the transposed matrix's row r). On the GPU one instruction; in
// the emulator the same words gathered through shuffles of the lanes' addresses.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(unsigned d[4], const bf16* row) {
#ifdef __CUDA_ARCH__
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(addr));
#else
#ifdef TANDEM_CUDA_EMULATOR_DEVICE
  ::cuda_emulator::require_shared(row, 16, 16, "ldmatrix");
#endif
  // A lane's address, shuffled as two 32-bit halves (what __shfl_sync takes everywhere).
  const auto at = reinterpret_cast<unsigned long long>(row);
  auto row_of = [at](int lane) {
    const unsigned lo = __shfl_sync(0xffffffffu, static_cast<unsigned>(at), lane);
    const unsigned hi = __shfl_sync(0xffffffffu, static_cast<unsigned>(at >> 32), lane);
    return reinterpret_cast<const bf16*>(static_cast<unsigned long long>(hi) << 32 | lo);
  };
  const int lane = threadIdx.x & 31, r = lane >> 2, w = lane & 3;
  for (int j = 0; j < 4; ++j) {
    if constexpr (Trans) {
      const bf16* r0 = row_of(j * 8 + 2 * w);
      const bf16* r1 = row_of(j * 8 + 2 * w + 1);
      d[j] = pack_bf16(r0[r], r1[r]);
    } else {
      const bf16* rr = row_of(j * 8 + r);
      d[j] = pack_bf16(rr[2 * w], rr[2 * w + 1]);
    }
  }
#endif
}

// Fragment loads from a row-major tile `s` with leading dimension `ld` (a multiple of 8, the
// tile 16-byte aligned; rows padded so that each 8-lane phase of a load hits distinct banks).
// Lane l addresses row l % 8 of matrix l / 8; the matrices are the fragments' 8 x 8 quarters.
__device__ __forceinline__ int ldmatrix_row() { return threadIdx.x & 7; }
__device__ __forceinline__ int ldmatrix_matrix() { return (threadIdx.x & 31) >> 3; }

// A = s[r0 .. r0+16)[c0 .. c0+16): a[0..3] are its quarters (rows +0/+8) x (columns +0/+8),
// rows first.
__device__ __forceinline__ void load_a(unsigned a[4], const bf16* s, int ld, int r0, int c0) {
  const int m = ldmatrix_matrix();
  ldmatrix_x4<false>(a, s + (r0 + (m & 1) * 8 + ldmatrix_row()) * ld + c0 + (m >> 1) * 8);
}

// Two B fragments, columns n0 .. n0+8 (b0) and n0+8 .. n0+16 (b1), of B[k][n] = s[n0 + n][k0 + k]:
// the tile's rows are B's columns (K for S = Q K^T).
__device__ __forceinline__ void load_b_rows_n(unsigned b0[2], unsigned b1[2], const bf16* s, int ld,
                                              int n0, int k0) {
  const int m = ldmatrix_matrix();
  unsigned d[4];
  ldmatrix_x4<false>(d, s + (n0 + (m >> 1) * 8 + ldmatrix_row()) * ld + k0 + (m & 1) * 8);
  b0[0] = d[0], b0[1] = d[1], b1[0] = d[2], b1[1] = d[3];
}

// Two B fragments, columns n0 .. n0+8 (b0) and n0+8 .. n0+16 (b1), of B[k][n] = s[k0 + k][n0 + n]:
// the tile's rows are B's rows (V for O = P V), loaded transposed.
__device__ __forceinline__ void load_b_rows_k(unsigned b0[2], unsigned b1[2], const bf16* s, int ld,
                                              int k0, int n0) {
  const int m = ldmatrix_matrix();
  unsigned d[4];
  ldmatrix_x4<true>(d, s + (k0 + (m & 1) * 8 + ldmatrix_row()) * ld + n0 + (m >> 1) * 8);
  b0[0] = d[0], b0[1] = d[1], b1[0] = d[2], b1[1] = d[3];
}

// Two accumulator tiles (columns 0-7 and 8-15 of a 16 x 16 product) as an A fragment, rounded.
__device__ __forceinline__ void accumulators_to_a(unsigned a[4], const float lo[4],
                                                  const float hi[4]) {
  a[0] = pack_f32(lo[0], lo[1]);
  a[1] = pack_f32(lo[2], lo[3]);
  a[2] = pack_f32(hi[0], hi[1]);
  a[3] = pack_f32(hi[2], hi[3]);
}

}  // namespace tandem::kernels::cuda::detail
