// What both attention kernel families (attention.cu, attention_flash.cu) agree on (internal): the
// problem's geometry and which keys a query sees (causal, sliding window, documents).
#pragma once

#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda::detail {

struct AttentionGeometry {
  i64 B, T, Hq, Hkv, D, window;
  float scale;
  const i64* doc_start;  // [B * T] or null
};

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// Query i sees key j: causal, inside the window (window <= 0: no window), in i's document.
__device__ __forceinline__ bool visible(i64 i, i64 j, i64 window, i64 doc) {
  return j <= i && (window <= 0 || i - window < j) && j >= doc;
}
__device__ __forceinline__ i64 doc_of(const AttentionGeometry& g, i64 b, i64 i) {
  return g.doc_start ? g.doc_start[b * g.T + i] : 0;
}

// The keys a query sees, and the queries that see a key, form intervals (documents start no later
// along the row), so a whole block of them is visible when both its ends are: the tensor-core
// kernels skip the mask on such blocks (most of a long sequence's).
// Query i sees every key of [j_lo, j_hi].
__device__ __forceinline__ bool sees_keys(i64 i, i64 j_lo, i64 j_hi, i64 window, i64 doc) {
  return visible(i, j_lo, window, doc) && visible(i, j_hi, window, doc);
}
// Every query of [i_lo, i_hi] (in documents starting at doc_lo and doc_hi) sees key j.
__device__ __forceinline__ bool seen_by_queries(i64 j, i64 i_lo, i64 i_hi, i64 window, i64 doc_lo,
                                                i64 doc_hi) {
  return visible(i_lo, j, window, doc_lo) && visible(i_hi, j, window, doc_hi);
}

// The first key any query of a block starting at row i0 can see: keys before the first query's
// window and document are visible to no query of the block.
__device__ __forceinline__ i64 first_visible_key(const AttentionGeometry& g, i64 b, i64 i0) {
  i64 j = g.window > 0 ? i0 - g.window + 1 : 0;
  if (j < 0) j = 0;
  const i64 doc = doc_of(g, b, i0);
  return doc > j ? doc : j;
}

// One past the last query that sees any key up to last_key: queries past the window of last_key,
// or in a document that starts after it, see none (document starts grow along the row: binary
// search).
__device__ __forceinline__ i64 query_end_for_keys(const AttentionGeometry& g, i64 b, i64 last_key) {
  i64 end = g.window > 0 && last_key + g.window < g.T ? last_key + g.window : g.T;
  if (!g.doc_start) return end;
  i64 lo = last_key, hi = end;  // first i in [lo, hi) with doc_start > last_key
  while (lo < hi) {
    const i64 mid = lo + (hi - lo) / 2;
    if (g.doc_start[b * g.T + mid] > last_key)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace tandem::kernels::cuda::detail
