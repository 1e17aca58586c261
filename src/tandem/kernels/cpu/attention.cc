// Causal sliding-window attention with GQA, flash-attention style: scores are computed one
// [query tile x key tile] block at a time with an online softmax, so memory is O(tile^2) per thread
// and tiles wholly outside the causal window are never visited (cost ~ T x window).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/fast_math.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

constexpr i64 kQueryTile = 128;
constexpr i64 kKeyTile = 64;

void check_shapes(i64 B, i64 T, i64 Hq, i64 Hkv, i64 D) {
  TANDEM_CHECK(B >= 0 && T >= 0 && D > 0, "attention: bad sizes B={} T={} D={}", B, T, D);
  TANDEM_CHECK(Hq > 0 && Hkv > 0 && Hq % Hkv == 0,
               "attention: query heads {} must be a positive multiple of kv heads {}", Hq, Hkv);
}

// Where each query's document begins in its row (OLMo-core's intra-document masking); without
// documents every row is one document starting at 0.
struct Documents {
  const std::int64_t* start = nullptr;  // [B * T] or null
  i64 T = 0;
  i64 of(i64 b, i64 i) const { return start ? start[b * T + i] : 0; }
};

void check_documents(const std::int64_t* doc_start, i64 B, i64 T) {
  if (!doc_start) return;
  for (i64 b = 0; b < B; ++b) {
    for (i64 t = 0; t < T; ++t) {
      const std::int64_t s = doc_start[b * T + t];
      TANDEM_CHECK(s >= 0 && s <= t, "attention: row {} position {} has document start {}", b, t,
                   s);
      TANDEM_CHECK(t == 0 || s >= doc_start[b * T + t - 1],
                   "attention: document starts decrease in row {} at position {}", b, t);
    }
  }
}

bool visible(i64 i, i64 j, i64 window, i64 doc_start) {
  return j <= i && (window <= 0 || i - window < j) && j >= doc_start;
}

// First key visible to query i.
i64 first_key(i64 i, i64 window) { return window > 0 ? std::max<i64>(0, i - window + 1) : 0; }

// True when some (query, key) pair of the block is masked, so the block needs per-element masking.
// Document starts grow along the row, so the tile's last query has the latest one.
bool block_needs_mask(i64 i0, i64 nq, i64 j0, i64 nk, i64 window, i64 last_doc_start) {
  const bool causal_cut = j0 + nk - 1 > i0;
  const bool window_cut = window > 0 && j0 <= (i0 + nq - 1) - window;
  const bool document_cut = last_doc_start > j0;
  return causal_cut || window_cut || document_cut;
}

void apply_mask(float* s, i64 ld, i64 i0, i64 nq, i64 j0, i64 nk, i64 window, const Documents& docs,
                i64 b) {
  for (i64 r = 0; r < nq; ++r) {
    const i64 doc_start = docs.of(b, i0 + r);
    for (i64 c = 0; c < nk; ++c) {
      if (!visible(i0 + r, j0 + c, window, doc_start)) s[r * ld + c] = detail::kNegInf;
    }
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                       const std::int64_t* doc_start) {
  check_shapes(B, T, Hq, Hkv, D);
  check_documents(doc_start, B, T);
  const Documents docs{doc_start, T};
  const i64 group = Hq / Hkv;
  const i64 q_tiles = (T + kQueryTile - 1) / kQueryTile;
  const i64 units = B * Hq * q_tiles;
  const i64 ldq = Hq * D;
  const i64 ldk = Hkv * D;
#pragma omp parallel
  {
    std::vector<float> s(kQueryTile * kKeyTile);
    std::vector<float> acc(kQueryTile * D);
    std::vector<float> row_max(kQueryTile);
    std::vector<float> row_sum(kQueryTile);
    // Interleaved static schedule: each unit's result does not depend on which thread runs it,
    // and interleaving balances the causal triangle's uneven tile costs.
#pragma omp for schedule(static, 1)
    for (i64 unit = 0; unit < units; ++unit) {
      const i64 qt = unit % q_tiles;
      const i64 h = (unit / q_tiles) % Hq;
      const i64 b = unit / (q_tiles * Hq);
      const i64 kvh = h / group;
      const i64 i0 = qt * kQueryTile;
      const i64 nq = std::min(kQueryTile, T - i0);
      const float* q_tile = q + ((b * T + i0) * Hq + h) * D;
      std::fill(acc.begin(), acc.begin() + nq * D, 0.0f);
      std::fill(row_max.begin(), row_max.end(), detail::kNegInf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      // Keys before the first query's window and document are visible to no query of the tile.
      const i64 last_doc_start = docs.of(b, i0 + nq - 1);
      for (i64 j0 = std::max(first_key(i0, window), docs.of(b, i0)); j0 < i0 + nq; j0 += kKeyTile) {
        const i64 nk = std::min(kKeyTile, i0 + nq - j0);
        const float* k_tile = k + ((b * T + j0) * Hkv + kvh) * D;
        const float* v_tile = v + ((b * T + j0) * Hkv + kvh) * D;
        gemm(false, true, nq, nk, D, scale, q_tile, ldq, k_tile, ldk, 0.0f, s.data(), kKeyTile);
        if (block_needs_mask(i0, nq, j0, nk, window, last_doc_start)) {
          apply_mask(s.data(), kKeyTile, i0, nq, j0, nk, window, docs, b);
        }
        for (i64 r = 0; r < nq; ++r) {
          float* sr = s.data() + r * kKeyTile;
          float tile_max = detail::kNegInf;
#pragma omp simd reduction(max : tile_max)
          for (i64 c = 0; c < nk; ++c) tile_max = std::max(tile_max, sr[c]);
          const float new_max = std::max(row_max[r], tile_max);
          if (new_max == detail::kNegInf) {  // nothing visible to this row yet
            std::fill(sr, sr + nk, 0.0f);
            continue;
          }
          const float correction = detail::exp_f32(row_max[r] - new_max);
          const float tile_sum = detail::exp_shifted_sum(sr, nk, new_max);
          row_sum[r] = row_sum[r] * correction + tile_sum;
          row_max[r] = new_max;
          if (correction != 1.0f) {
            float* ar = acc.data() + r * D;
#pragma omp simd
            for (i64 c = 0; c < D; ++c) ar[c] *= correction;
          }
        }
        gemm(false, false, nq, D, nk, 1.0f, s.data(), kKeyTile, v_tile, ldk, 1.0f, acc.data(), D);
      }
      for (i64 r = 0; r < nq; ++r) {
        const i64 i = i0 + r;
        const float inv = 1.0f / row_sum[r];
        float* o = out + ((b * T + i) * Hq + h) * D;
        const float* ar = acc.data() + r * D;
#pragma omp simd
        for (i64 c = 0; c < D; ++c) o[c] = ar[c] * inv;
        lse[(b * Hq + h) * T + i] = row_max[r] + std::log(row_sum[r]);
      }
    }
  }
}

void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, i64 B,
                        i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                        const std::int64_t* doc_start) {
  check_shapes(B, T, Hq, Hkv, D);
  check_documents(doc_start, B, T);
  const Documents docs{doc_start, T};
  const i64 group = Hq / Hkv;
  const i64 ldq = Hq * D;
  const i64 ldk = Hkv * D;
  // delta_i = rowsum(dout_i * out_i), laid out like lse: [B, Hq, T].
  std::vector<float> delta(static_cast<size_t>(B * Hq * T));
#pragma omp parallel for schedule(static)
  for (i64 bt = 0; bt < B * T; ++bt) {
    const i64 b = bt / T;
    const i64 t = bt % T;
    for (i64 h = 0; h < Hq; ++h) {
      const float* o = out + (bt * Hq + h) * D;
      const float* g = dout + (bt * Hq + h) * D;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (i64 c = 0; c < D; ++c) sum += o[c] * g[c];
      delta[(b * Hq + h) * T + t] = sum;
    }
  }
  // One unit per (batch, kv head): it alone writes dk/dv of that kv head and dq of the query heads
  // sharing it, so there are no races, and it visits blocks in a fixed order (deterministic).
  const i64 units = B * Hkv;
#pragma omp parallel
  {
    std::vector<float> p(kQueryTile * kKeyTile);
    std::vector<float> dp(kQueryTile * kKeyTile);
#pragma omp for schedule(static, 1)
    for (i64 unit = 0; unit < units; ++unit) {
      const i64 b = unit / Hkv;
      const i64 kvh = unit % Hkv;
      for (i64 t = 0; t < T; ++t) {
        std::fill_n(dk + ((b * T + t) * Hkv + kvh) * D, D, 0.0f);
        std::fill_n(dv + ((b * T + t) * Hkv + kvh) * D, D, 0.0f);
        std::fill_n(dq + ((b * T + t) * Hq + kvh * group) * D, group * D, 0.0f);
      }
      for (i64 j0 = 0; j0 < T; j0 += kKeyTile) {
        const i64 nk = std::min(kKeyTile, T - j0);
        const i64 key_offset = ((b * T + j0) * Hkv + kvh) * D;
        const float* k_tile = k + key_offset;
        const float* v_tile = v + key_offset;
        float* dk_tile = dk + key_offset;
        float* dv_tile = dv + key_offset;
        // Queries that see at least one key of this tile: within the window of its last key and in
        // a document that starts at or before that key.
        i64 q_end = window > 0 ? std::min(T, j0 + nk - 1 + window) : T;
        if (doc_start) {
          const std::int64_t* row = doc_start + b * T;
          q_end = std::upper_bound(row + j0 + nk - 1, row + q_end, j0 + nk - 1) - row;
        }
        for (i64 h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* lse_h = lse + (b * Hq + h) * T;
          const float* delta_h = delta.data() + (b * Hq + h) * T;
          for (i64 i0 = j0; i0 < q_end; i0 += kQueryTile) {
            const i64 nq = std::min(kQueryTile, q_end - i0);
            const i64 query_offset = ((b * T + i0) * Hq + h) * D;
            const float* q_tile = q + query_offset;
            const float* do_tile = dout + query_offset;
            float* dq_tile = dq + query_offset;
            gemm(false, true, nq, nk, D, scale, q_tile, ldq, k_tile, ldk, 0.0f, p.data(), kKeyTile);
            const bool masked = block_needs_mask(i0, nq, j0, nk, window, docs.of(b, i0 + nq - 1));
            for (i64 r = 0; r < nq; ++r) {
              float* pr = p.data() + r * kKeyTile;
              detail::exp_shifted_sum(pr, nk, lse_h[i0 + r]);  // P = exp(S - lse)
              if (masked) {
                const i64 doc = docs.of(b, i0 + r);
                for (i64 c = 0; c < nk; ++c) {
                  if (!visible(i0 + r, j0 + c, window, doc)) pr[c] = 0.0f;
                }
              }
            }
            // dV_j += P^T dO_i ; dP = dO_i V_j^T.
            gemm(true, false, nk, D, nq, 1.0f, p.data(), kKeyTile, do_tile, ldq, 1.0f, dv_tile,
                 ldk);
            gemm(false, true, nq, nk, D, 1.0f, do_tile, ldq, v_tile, ldk, 0.0f, dp.data(),
                 kKeyTile);
            // dS = P * (dP - delta_i), kept in dp.
            for (i64 r = 0; r < nq; ++r) {
              const float* pr = p.data() + r * kKeyTile;
              float* dpr = dp.data() + r * kKeyTile;
              const float dl = delta_h[i0 + r];
#pragma omp simd
              for (i64 c = 0; c < nk; ++c) dpr[c] = pr[c] * (dpr[c] - dl);
            }
            // dK_j += scale dS^T Q_i ; dQ_i += scale dS K_j.
            gemm(true, false, nk, D, nq, scale, dp.data(), kKeyTile, q_tile, ldq, 1.0f, dk_tile,
                 ldk);
            gemm(false, false, nq, D, nk, scale, dp.data(), kKeyTile, k_tile, ldk, 1.0f, dq_tile,
                 ldq);
          }
        }
      }
    }
  }
}

}  // namespace tandem::kernels::cpu
