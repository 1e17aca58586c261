// Tensor-core attention for bf16: flash-attention 2's tiling on mma.sync m16n8k16 (mma.cuh),
// causal, sliding window, GQA, optional intra-document masking, head_dim up to 128. It is the
// path bf16 attention takes where cuDNN's fused SDPA does not (libcudnn missing, a problem cuDNN
// refuses, documents), in place of the plain kernels' fp32 arithmetic on CUDA cores.
//
// Numerics are cuDNN's: scores and every sum in fp32 (the tensor cores' accumulators, fixed-order
// quad shuffles for the softmax rows), the probabilities rounded to bf16 before P V, and P and dS
// rounded to bf16 before the backward's products; lse is the natural log of the scaled scores'
// sum, the quantity the plain kernels and cuDNN save, so a forward on one path and a backward on
// another agree (inside, exponentials are taken in base 2). Deterministic: no atomics; the backward
// takes the plain kernels' two passes (dQ over query rows, then dK and dV over key rows, each
// output with one writer).
//
// Layout: a block is 4 warps; each warp owns 16 rows (queries in the forward and dQ, keys in
// dK/dV), kept as A fragments in registers, and the block walks 64-row tiles of the other side
// through shared memory, loading the next tile by cp.async while it computes on the current one
// (the forward alternates K and V in one buffer each; the backward alternates two buffers). Shared
// rows are head_dim rounded up to a multiple of 16 (zero-filled), plus 8 bf16 of padding so that
// each fragment load's 32 lanes hit 32 banks. The dynamic shared memory is declared 16-byte
// aligned, as ldmatrix and the 16-byte cp.async need: the dK/dV kernel's follows a static word,
// which ptxas pads to 16 bytes today, but only the declaration promises it.
#include <cstdint>
#include <type_traits>

#include "tandem/kernels/cuda/attention_masks.cuh"
#include "tandem/kernels/cuda/mma.cuh"
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // rows a block owns: queries (forward, dQ) or keys (dK/dV)
constexpr int kCols = 64;           // rows of the other side per shared tile
constexpr int kPad = 8;
// Exponentials are exp2 of scores scaled by log2(e) (one multiply-add and the hardware's exp2);
// lse goes out, and comes in, as the natural log the other paths save.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using Geometry = detail::AttentionGeometry;
using detail::doc_of;
using detail::first_visible_key;
using detail::neg_inf;
using detail::visible;

// s[r][c] = x[b, r0 + r, head, c] for 64 rows and Dp columns: zero at rows >= end, columns >= D.
// In 16-byte pieces where every row of x starts 16-byte aligned (shared rows always do: Dp + 8
// bf16 is a multiple of 8), else element by element. Async: the 16-byte pieces go as cp.async
// copies (the caller commits the group and waits for it); element by element they land at once.
template <int Dp, bool Async = false>
__device__ void load_tile(const bf16* x, const Geometry& g, i64 b, i64 heads, i64 head, i64 r0,
                          i64 end, bf16* s) {
  constexpr int ld = Dp + kPad;
  if (g.D % 8 == 0 && (reinterpret_cast<std::uintptr_t>(x) & 15) == 0) {
    for (int e = threadIdx.x; e < 64 * Dp / 8; e += blockDim.x) {
      const int r = e / (Dp / 8), c = e % (Dp / 8) * 8;
      const i64 row = r0 + r;
      const bool valid = row < end && c < g.D;
      const bf16* from = valid ? x + ((b * g.T + row) * heads + head) * g.D + c : x;
      if constexpr (Async)
        detail::cp_async_16(s + r * ld + c, from, valid);
      else
        detail::store_pack(s + r * ld + c, valid ? detail::load_pack(from) : detail::Pack{});
    }
    return;
  }
  const bf16 zero = __ushort_as_bfloat16(0);
  for (int e = threadIdx.x; e < 64 * Dp; e += blockDim.x) {
    const int r = e / Dp, c = e % Dp;
    const i64 row = r0 + r;
    s[r * ld + c] = row < end && c < g.D ? x[((b * g.T + row) * heads + head) * g.D + c] : zero;
  }
}

// Query blocks in reverse launch order: under the causal mask the last rows see the most keys, so
// they start first and the short blocks fill the tail (flash-attention 2's order).
__device__ __forceinline__ i64 last_rows_first() { return i64{gridDim.x} - 1 - blockIdx.x; }

// Sum over the 4 lanes holding one accumulator row (lanes 4g .. 4g+3), same order every run.
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Row `r` (0: g, 1: g + 8) and column of accumulator element e of an 8-column tile.
__device__ __forceinline__ int acc_row(int e) { return (threadIdx.x & 31) / 4 + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int e) { return 2 * (threadIdx.x & 3) + (e & 1); }

// Writes a warp's 16 x Dp accumulator rows (times `factor`) into x[b, row, head, :] as bf16.
template <int Dp>
__device__ void store_rows(bf16* x, const Geometry& g, i64 b, i64 heads, i64 head, i64 row0,
                           const float (&acc)[Dp / 8][4], const float factor[2]) {
#pragma unroll
  for (int dt = 0; dt < Dp / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const i64 row = row0 + acc_row(e);
      const int c = dt * 8 + acc_col(e);
      if (row < g.T && c < g.D)
        x[((b * g.T + row) * heads + head) * g.D + c] =
            detail::to_bf16(acc[dt][e] * factor[e >> 1]);
    }
  }
}

// A warp's 16 rows as A fragments, held in registers for the whole kernel (they are the same
// for every tile of the other side): Q in the forward and dQ (with dO), K and V in dK/dV.
template <int Dp>
using Fragments = unsigned[Dp / 16][4];

template <int Dp>
__device__ __forceinline__ void load_fragments(Fragments<Dp>& a, const bf16* s, int r0) {
#pragma unroll
  for (int kk = 0; kk < Dp / 16; ++kk) detail::load_a(a[kk], s, Dp + kPad, r0, kk * 16);
}

// ---- forward ----

// Both of the lane's query rows are in the problem and see every key of [j_lo, j_hi] (so none
// past the block's last query: the mask is causal).
__device__ __forceinline__ bool rows_see_keys(const i64 (&row)[2], const i64 (&doc)[2], i64 j_lo,
                                              i64 j_hi, const Geometry& g) {
  for (int r = 0; r < 2; ++r)
    if (row[r] >= g.T || !detail::sees_keys(row[r], j_lo, j_hi, g.window, doc[r])) return false;
  return true;
}

// The online softmax over one tile of scores `s` (16 rows of the warp x 64 keys from jt): masks
// them and scales them by `scale2` (the softmax scale times log2(e)), updates the rows' running
// max `m` (base 2) and sum `l`, rescales the accumulator `o`, and leaves P = 2^(s - m) in `s` for
// P V. Unmasked (!Masked): every key of the tile is visible to both of the lane's rows.
template <int Dp, bool Masked>
__device__ __forceinline__ void softmax_tile(float (&s)[kCols / 8][4], float (&o)[Dp / 8][4],
                                             float (&m)[2], float (&l)[2], const i64 (&row)[2],
                                             const i64 (&doc)[2], i64 jt, i64 last, float scale2,
                                             const Geometry& g) {
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const i64 j = jt + nt * 8 + acc_col(e);
      const bool seen =
          !Masked || (row[r] < g.T && j <= last && visible(row[r], j, g.window, doc[r]));
      s[nt][e] = seen ? s[nt][e] * scale2 : neg_inf();
      mx[r] = fmaxf(mx[r], s[nt][e]);
    }
  }
  float correction[2], sum[2] = {0.0f, 0.0f};
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    // Nothing seen by this row yet: its o and l are zero, any factor leaves them so.
    correction[r] = mx[r] == neg_inf() ? 1.0f : exp2f(m[r] - mx[r]);
  }
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      s[nt][e] = s[nt][e] == neg_inf() ? 0.0f : exp2f(s[nt][e] - mx[r]);
      sum[r] += s[nt][e];
    }
  }
  for (int r = 0; r < 2; ++r) {
    l[r] = l[r] * correction[r] + quad_sum(sum[r]);
    m[r] = mx[r];
  }
#pragma unroll
  for (int dt = 0; dt < Dp / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] *= correction[e >> 1];
}

template <int Dp>
__global__ void __launch_bounds__(kWarps * 32)
    flash_forward_kernel(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                         Geometry g) {
  extern __shared__ __align__(16) bf16 smem[];
  constexpr int ld = Dp + kPad;
  bf16* qs = smem;             // [kRows][ld]
  bf16* ks = qs + kRows * ld;  // [kCols][ld]
  bf16* vs = ks + kCols * ld;  // [kCols][ld]
  const int warp = threadIdx.x >> 5;
  const i64 i0 = last_rows_first() * kRows, h = blockIdx.y, b = blockIdx.z;
  const i64 kvh = h / (g.Hq / g.Hkv);
  const i64 last = (i0 + kRows < g.T ? i0 + kRows : g.T) - 1;  // the block's last query
  const i64 w0 = i0 + warp * 16;                               // the warp's first query
  load_tile<Dp, true>(q, g, b, g.Hq, h, i0, g.T, qs);
  detail::cp_async_commit();
  i64 row[2], doc[2];
  for (int r = 0; r < 2; ++r) {
    row[r] = w0 + acc_row(2 * r);
    doc[r] = row[r] < g.T ? doc_of(g, b, row[r]) : 0;
  }
  const float scale2 = g.scale * kLog2e;

  float o[Dp / 8][4] = {};
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  // K and V tiles come in by cp.async, each while the other is in use (flash-attention 2's
  // order): V(jt) while S = Q K(jt) and its softmax are computed, K(jt + 64) while O += P V(jt).
  const i64 j_begin = first_visible_key(g, b, i0);  // at most i0: every query sees itself
  load_tile<Dp, true>(k, g, b, g.Hkv, kvh, j_begin, last + 1, ks);
  detail::cp_async_commit();
  detail::cp_async_wait<1>();  // Q (K may still be on its way)
  __syncthreads();
  Fragments<Dp> qa;  // the warp's queries, for every key tile
  load_fragments<Dp>(qa, qs, warp * 16);
  for (i64 jt = j_begin; jt <= last; jt += kCols) {
    detail::cp_async_wait<0>();  // K(jt)
    __syncthreads();             // every thread's K(jt) is in; every warp is done with V(jt - 64)
    load_tile<Dp, true>(v, g, b, g.Hkv, kvh, jt, last + 1, vs);
    detail::cp_async_commit();
    // A warp whose queries all come before the tile computes nothing but keeps the barriers.
    const bool sees = jt <= w0 + 15;
    const bool unmasked = __all_sync(0xffffffffu, rows_see_keys(row, doc, jt, jt + kCols - 1, g));

    float s[kCols / 8][4] = {};
    if (sees) {
#pragma unroll
      for (int kk = 0; kk < Dp / 16; ++kk) {
#pragma unroll
        for (int nt = 0; nt < kCols / 8; nt += 2) {
          unsigned bk[2], bk2[2];
          detail::load_b_rows_n(bk, bk2, ks, ld, nt * 8, kk * 16);
          detail::mma_16x8x16(s[nt], qa[kk], bk);
          detail::mma_16x8x16(s[nt + 1], qa[kk], bk2);
        }
      }
      if (unmasked)
        softmax_tile<Dp, false>(s, o, m, l, row, doc, jt, last, scale2, g);
      else
        softmax_tile<Dp, true>(s, o, m, l, row, doc, jt, last, scale2, g);
    }
    detail::cp_async_wait<0>();  // V(jt)
    __syncthreads();             // every thread's V(jt) is in; every warp is done with K(jt)
    if (jt + kCols <= last) load_tile<Dp, true>(k, g, b, g.Hkv, kvh, jt + kCols, last + 1, ks);
    detail::cp_async_commit();
    if (sees) {
#pragma unroll
      for (int kk = 0; kk < kCols / 16; ++kk) {
        unsigned p[4];
        detail::accumulators_to_a(p, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dt = 0; dt < Dp / 8; dt += 2) {
          unsigned bv[2], bv2[2];
          detail::load_b_rows_k(bv, bv2, vs, ld, kk * 16, dt * 8);
          detail::mma_16x8x16(o[dt], p, bv);
          detail::mma_16x8x16(o[dt + 1], p, bv2);
        }
      }
    }
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
  store_rows<Dp>(out, g, b, g.Hq, h, w0, o, inv);
  if ((threadIdx.x & 3) == 0) {
    for (int r = 0; r < 2; ++r)
      if (row[r] < g.T) lse[(b * g.Hq + h) * g.T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// ---- backward ----

// The backward's two 16 x 16 products over the head dimension: s += A B[b0 .. b0+16)^T and
// dp += A2 B2[b0 ..)^T, with A and A2 the warp's 16 rows as fragments in registers (`Fragments`,
// loaded once per kernel: they are the same for every tile of the other side) and B, B2 shared
// tiles. dQ: S = Q K^T, dP = dO V^T (rows: queries); dK/dV: S^T = K Q^T, dP^T = V dO^T (rows:
// keys).
template <int Dp>
__device__ __forceinline__ void score_pair(float (&s)[2][4], float (&dp)[2][4],
                                           const Fragments<Dp>& a, const Fragments<Dp>& a2,
                                           const bf16* b, const bf16* b2, int b0) {
  constexpr int ld = Dp + kPad;
#pragma unroll
  for (int kk = 0; kk < Dp / 16; ++kk) {
    unsigned y[2][2], y2[2][2];
    detail::load_b_rows_n(y[0], y[1], b, ld, b0, kk * 16);
    detail::load_b_rows_n(y2[0], y2[1], b2, ld, b0, kk * 16);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      detail::mma_16x8x16(s[n], a[kk], y[n]);
      detail::mma_16x8x16(dp[n], a2[kk], y2[n]);
    }
  }
}

// dS = P (dP - delta) in `s` for 16 keys from j0 (P = exp(S scale - lse) = 2^(S scale2 - lse2)
// with scale2 and lse2 in base 2; zero where masked).
template <bool Masked>
__device__ __forceinline__ void scores_to_ds(float (&s)[2][4], const float (&dp)[2][4],
                                             const i64 (&row)[2], const i64 (&doc)[2],
                                             const float (&lse2)[2], const float (&delta_r)[2],
                                             i64 j0, i64 last, float scale2, const Geometry& g) {
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const i64 j = j0 + n * 8 + acc_col(e);
      const bool seen =
          !Masked || (row[r] < g.T && j <= last && visible(row[r], j, g.window, doc[r]));
      const float p = seen ? exp2f(fmaf(s[n][e], scale2, -lse2[r])) : 0.0f;
      s[n][e] = p * (dp[n][e] - delta_r[r]);
    }
  }
}

template <int Dp>
__global__ void __launch_bounds__(kWarps * 32)
    flash_dq_kernel(const bf16* q, const bf16* k, const bf16* v, const float* lse, const bf16* dout,
                    const float* delta, bf16* dq, Geometry g) {
  extern __shared__ __align__(16) bf16 smem[];
  constexpr int ld = Dp + kPad;
  // Two buffers of two [64][ld] tiles: buffer 0 first holds the block's Q and dO, which each warp
  // then keeps in registers; after that K and V tiles alternate between the buffers, the next
  // coming in by cp.async while the warps work on the current one.
  const auto tile = [&](int buffer, int which) { return smem + (2 * buffer + which) * kRows * ld; };
  const int warp = threadIdx.x >> 5;
  const i64 i0 = last_rows_first() * kRows, h = blockIdx.y, b = blockIdx.z;
  const i64 kvh = h / (g.Hq / g.Hkv);
  const i64 last = (i0 + kRows < g.T ? i0 + kRows : g.T) - 1;
  const i64 w0 = i0 + warp * 16;
  const auto load_kv = [&](i64 jt, int buffer) {
    load_tile<Dp, true>(k, g, b, g.Hkv, kvh, jt, last + 1, tile(buffer, 0));
    load_tile<Dp, true>(v, g, b, g.Hkv, kvh, jt, last + 1, tile(buffer, 1));
    detail::cp_async_commit();
  };
  load_tile<Dp, true>(q, g, b, g.Hq, h, i0, g.T, tile(0, 0));
  load_tile<Dp, true>(dout, g, b, g.Hq, h, i0, g.T, tile(0, 1));
  detail::cp_async_commit();
  i64 jt = first_visible_key(g, b, i0);  // at most i0: every query sees itself
  load_kv(jt, 1);
  i64 row[2], doc[2];
  float lse2[2], delta_r[2];
  for (int r = 0; r < 2; ++r) {
    row[r] = w0 + acc_row(2 * r);
    const bool in = row[r] < g.T;
    doc[r] = in ? doc_of(g, b, row[r]) : 0;
    lse2[r] = in ? lse[(b * g.Hq + h) * g.T + row[r]] * kLog2e : 0.0f;
    delta_r[r] = in ? delta[(b * g.Hq + h) * g.T + row[r]] : 0.0f;
  }
  const float scale2 = g.scale * kLog2e;
  detail::cp_async_wait<1>();  // Q and dO (K and V may still be on their way)
  __syncthreads();
  Fragments<Dp> qa, doa;  // the warp's queries and output gradients, for every key tile
  load_fragments<Dp>(qa, tile(0, 0), warp * 16);
  load_fragments<Dp>(doa, tile(0, 1), warp * 16);

  float acc[Dp / 8][4] = {};
  for (int cur = 1; jt <= last; jt += kCols, cur ^= 1) {
    // Every thread's K(jt) and V(jt) are in, and every warp is done with the other buffer.
    detail::cp_async_wait<0>();
    __syncthreads();
    if (jt + kCols <= last) load_kv(jt + kCols, cur ^ 1);
    const bf16* ks = tile(cur, 0);
    const bf16* vs = tile(cur, 1);
#pragma unroll
    for (int kc = 0; kc < kCols / 16; ++kc) {
      if (jt + kc * 16 > w0 + 15) break;  // keys after every query of the warp
      const i64 j0 = jt + kc * 16;
      const bool unmasked = __all_sync(0xffffffffu, rows_see_keys(row, doc, j0, j0 + 15, g));
      float s[2][4] = {}, dp[2][4] = {};
      score_pair<Dp>(s, dp, qa, doa, ks, vs, kc * 16);
      if (unmasked)
        scores_to_ds<false>(s, dp, row, doc, lse2, delta_r, j0, last, scale2, g);
      else
        scores_to_ds<true>(s, dp, row, doc, lse2, delta_r, j0, last, scale2, g);
      unsigned ds[4];
      detail::accumulators_to_a(ds, s[0], s[1]);
#pragma unroll
      for (int dt = 0; dt < Dp / 8; dt += 2) {
        unsigned bk[2], bk2[2];
        detail::load_b_rows_k(bk, bk2, ks, ld, kc * 16, dt * 8);
        detail::mma_16x8x16(acc[dt], ds, bk);
        detail::mma_16x8x16(acc[dt + 1], ds, bk2);
      }
    }
  }
  const float scale[2] = {g.scale, g.scale};
  store_rows<Dp>(dq, g, b, g.Hq, h, w0, acc, scale);
}

// The per-query values the dK/dV kernel reads for each tile of 64 queries of one head.
struct QueryRows {
  i64 doc[kCols];
  float lse[kCols], delta[kCols];
};

// Both of the lane's keys are in the problem and seen by every query of tile columns
// [c0, c0 + 16) (queries from it + c0, all before i_end).
__device__ __forceinline__ bool keys_seen_by_queries(const i64 (&key)[2], const QueryRows& qr,
                                                     i64 it, int c0, i64 i_end, const Geometry& g) {
  const i64 i_lo = it + c0, i_hi = i_lo + 15;
  if (i_hi >= i_end) return false;
  for (int r = 0; r < 2; ++r)
    if (key[r] >= g.T ||
        !detail::seen_by_queries(key[r], i_lo, i_hi, g.window, qr.doc[c0], qr.doc[c0 + 15]))
      return false;
  return true;
}

// P^T in `s` and dS^T = P^T (dP^T - delta) in `dp` for the lane's keys and 16 queries from
// it + c0 (P in base 2 as in scores_to_ds; zero where masked).
template <bool Masked>
__device__ __forceinline__ void scores_to_p_ds(float (&s)[2][4], float (&dp)[2][4],
                                               const i64 (&key)[2], const QueryRows& qr, i64 it,
                                               int c0, i64 i_end, float scale2, const Geometry& g) {
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = c0 + n * 8 + acc_col(e);
      const i64 i = it + c, j = key[e >> 1];
      const bool seen = !Masked || (j < g.T && i < i_end && visible(i, j, g.window, qr.doc[c]));
      const float p = seen ? exp2f(fmaf(s[n][e], scale2, -qr.lse[c] * kLog2e)) : 0.0f;
      s[n][e] = p;
      dp[n][e] = p * (dp[n][e] - qr.delta[c]);
    }
  }
}

template <int Dp>
__global__ void __launch_bounds__(kWarps * 32)
    flash_dkdv_kernel(const bf16* q, const bf16* k, const bf16* v, const float* lse,
                      const bf16* dout, const float* delta, bf16* dk, bf16* dv, Geometry g) {
  extern __shared__ __align__(16) i64 shared_words[];
  __shared__ i64 query_end;
  constexpr int ld = Dp + kPad;
  // As in dQ with the sides swapped: buffer 0 first holds the block's K and V (kept in registers
  // after), then Q and dO tiles (with their rows' documents, lse and delta) alternate.
  QueryRows* rows = reinterpret_cast<QueryRows*>(shared_words);  // [2]
  bf16* tiles = reinterpret_cast<bf16*>(rows + 2);
  const auto tile = [&](int buffer, int which) {
    return tiles + (2 * buffer + which) * kRows * ld;
  };
  const int warp = threadIdx.x >> 5;
  const i64 j0 = i64{blockIdx.x} * kRows, kvh = blockIdx.y, b = blockIdx.z;
  const i64 group = g.Hq / g.Hkv, h_end = (kvh + 1) * group;
  const i64 last_key = (j0 + kRows < g.T ? j0 + kRows : g.T) - 1;
  const i64 w0 = j0 + warp * 16;  // the warp's first key
  load_tile<Dp, true>(k, g, b, g.Hkv, kvh, j0, g.T, tile(0, 0));
  load_tile<Dp, true>(v, g, b, g.Hkv, kvh, j0, g.T, tile(0, 1));
  detail::cp_async_commit();
  if (threadIdx.x == 0) query_end = detail::query_end_for_keys(g, b, last_key);
  __syncthreads();
  const i64 i_end = query_end;  // more than j0: every key is seen by its own query
  const auto load_queries = [&](i64 h, i64 it, int buffer) {
    load_tile<Dp, true>(q, g, b, g.Hq, h, it, i_end, tile(buffer, 0));
    load_tile<Dp, true>(dout, g, b, g.Hq, h, it, i_end, tile(buffer, 1));
    if (threadIdx.x < kCols) {
      const int c = threadIdx.x;
      const i64 i = it + c;
      const bool in = i < i_end;
      QueryRows& to = rows[buffer];
      const i64 at = (b * g.Hq + h) * g.T + (in ? i : 0);
      detail::cp_async_word<4>(&to.lse[c], lse + at, in);
      detail::cp_async_word<4>(&to.delta[c], delta + at, in);
      if (g.doc_start)
        detail::cp_async_word<8>(&to.doc[c], g.doc_start + b * g.T + (in ? i : 0), in);
      else
        to.doc[c] = 0;
    }
    detail::cp_async_commit();
  };
  i64 h = kvh * group, it = j0;
  load_queries(h, it, 1);
  detail::cp_async_wait<1>();  // K and V
  __syncthreads();
  Fragments<Dp> ka, va;  // the warp's keys and values, for every query tile
  load_fragments<Dp>(ka, tile(0, 0), warp * 16);
  load_fragments<Dp>(va, tile(0, 1), warp * 16);
  i64 key[2];
  for (int r = 0; r < 2; ++r) key[r] = w0 + acc_row(2 * r);
  const float scale2 = g.scale * kLog2e;

  float acc_k[Dp / 8][4] = {}, acc_v[Dp / 8][4] = {};
  // Every query tile from j0 to i_end of every query head of the group, in that order.
  for (int cur = 1;; cur ^= 1) {
    detail::cp_async_wait<0>();  // this tile's Q, dO and rows
    __syncthreads();             // every thread's are in; every warp is done with the other buffer
    i64 next_h = h, next_it = it + kCols;
    if (next_it >= i_end) {
      ++next_h;
      next_it = j0;
    }
    if (next_h < h_end) load_queries(next_h, next_it, cur ^ 1);
    const bf16* qs = tile(cur, 0);
    const bf16* dos = tile(cur, 1);
    const QueryRows& qr = rows[cur];
#pragma unroll
    for (int qc = 0; qc < kCols / 16; ++qc) {
      if (it + qc * 16 + 15 < w0) continue;  // queries before every key of the warp
      const bool unmasked =
          __all_sync(0xffffffffu, keys_seen_by_queries(key, qr, it, qc * 16, i_end, g));
      float s[2][4] = {}, dp[2][4] = {};
      score_pair<Dp>(s, dp, ka, va, qs, dos, qc * 16);  // S^T and dP^T
      if (unmasked)
        scores_to_p_ds<false>(s, dp, key, qr, it, qc * 16, i_end, scale2, g);
      else
        scores_to_p_ds<true>(s, dp, key, qr, it, qc * 16, i_end, scale2, g);
      unsigned pt[4], dst[4];
      detail::accumulators_to_a(pt, s[0], s[1]);
      detail::accumulators_to_a(dst, dp[0], dp[1]);
#pragma unroll
      for (int dt = 0; dt < Dp / 8; dt += 2) {
        unsigned bdo[2][2], bq[2][2];
        detail::load_b_rows_k(bdo[0], bdo[1], dos, ld, qc * 16, dt * 8);
        detail::load_b_rows_k(bq[0], bq[1], qs, ld, qc * 16, dt * 8);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          detail::mma_16x8x16(acc_v[dt + n], pt, bdo[n]);
          detail::mma_16x8x16(acc_k[dt + n], dst, bq[n]);
        }
      }
    }
    if (next_h == h_end) break;
    h = next_h;
    it = next_it;
  }
  const float one[2] = {1.0f, 1.0f}, scale[2] = {g.scale, g.scale};
  store_rows<Dp>(dk, g, b, g.Hkv, kvh, w0, acc_k, scale);
  store_rows<Dp>(dv, g, b, g.Hkv, kvh, w0, acc_v, one);
}

constexpr std::size_t tile_bytes(int Dp) { return sizeof(bf16) * 64 * (Dp + kPad); }

template <int Dp>
void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse, const Geometry& g,
             cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((g.T + kRows - 1) / kRows), static_cast<unsigned>(g.Hq),
                  static_cast<unsigned>(g.B));
  const std::size_t smem = 3 * tile_bytes(Dp);
  detail::allow_smem(flash_forward_kernel<Dp>, smem, "attention_forward (tensor cores)");
  flash_forward_kernel<Dp><<<grid, kWarps * 32, smem, stream>>>(q, k, v, out, lse, g);
  check_launch("attention_forward (tensor cores)");
}

template <int Dp>
void backward(const bf16* q, const bf16* k, const bf16* v, const float* lse, const bf16* dout,
              const float* delta, bf16* dq, bf16* dk, bf16* dv, const Geometry& g,
              cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>((g.T + kRows - 1) / kRows);
  const std::size_t dq_smem = 4 * tile_bytes(Dp);
  detail::allow_smem(flash_dq_kernel<Dp>, dq_smem, "attention_backward (dq, tensor cores)");
  flash_dq_kernel<Dp><<<dim3(tiles, static_cast<unsigned>(g.Hq), static_cast<unsigned>(g.B)),
                        kWarps * 32, dq_smem, stream>>>(q, k, v, lse, dout, delta, dq, g);
  check_launch("attention_backward (dq, tensor cores)");
  const std::size_t dkdv_smem = 2 * sizeof(QueryRows) + 4 * tile_bytes(Dp);
  detail::allow_smem(flash_dkdv_kernel<Dp>, dkdv_smem, "attention_backward (dk, dv, tensor cores)");
  flash_dkdv_kernel<Dp><<<dim3(tiles, static_cast<unsigned>(g.Hkv), static_cast<unsigned>(g.B)),
                          kWarps * 32, dkdv_smem, stream>>>(q, k, v, lse, dout, delta, dk, dv, g);
  check_launch("attention_backward (dk, dv, tensor cores)");
}

// Calls f(std::integral_constant<int, Dp>) with head_dim rounded up to the kernels'
// instantiations (16, 32, 64, 128).
template <typename F>
void with_padded_head_dim(i64 D, F&& f) {
  if (D <= 16) return f(std::integral_constant<int, 16>{});
  if (D <= 32) return f(std::integral_constant<int, 32>{});
  if (D <= 64) return f(std::integral_constant<int, 64>{});
  f(std::integral_constant<int, 128>{});
}

const bf16* in(const void* p) { return static_cast<const bf16*>(p); }
bf16* out(void* p) { return static_cast<bf16*>(p); }

}  // namespace

bool flash_attention_supports(i64 head_dim) { return head_dim > 0 && head_dim <= kFlashMaxHeadDim; }

void flash_attention_forward(const void* q, const void* k, const void* v, void* o, float* lse,
                             i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                             const i64* doc_start, cudaStream_t stream) {
  if (B * T * Hq == 0) return;
  const Geometry g{B, T, Hq, Hkv, D, window, scale, doc_start};
  with_padded_head_dim(D, [&](auto dp) {
    forward<decltype(dp)::value>(in(q), in(k), in(v), out(o), lse, g, stream);
  });
}

void flash_attention_backward(const void* q, const void* k, const void* v, const void* o,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                              const i64* doc_start, float* delta, cudaStream_t stream) {
  if (B * T * Hq == 0) return;
  attention_delta(Elem::bf16, o, dout, delta, B, T, Hq, D, stream);
  const Geometry g{B, T, Hq, Hkv, D, window, scale, doc_start};
  with_padded_head_dim(D, [&](auto dp) {
    backward<decltype(dp)::value>(in(q), in(k), in(v), lse, in(dout), delta, out(dq), out(dk),
                                  out(dv), g, stream);
  });
}

}  // namespace tandem::kernels::cuda
