// Fused lm_head + cross-entropy + z-loss. Tokens are processed in chunks whose logits fit in
// about 32 MB, so the full [N, V] logits never exist; the chunk buffer is turned into dlogits in
// place and fed to the two gradient gemms.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/kernels/cpu/bf16.h"
#include "tandem/kernels/cpu/cross_entropy_chunked.h"
#include "tandem/kernels/cpu/fast_math.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

constexpr i64 kMaxChunkBytes = i64{32} << 20;

// Turns one row of logits into exp(logit - max) in place; the sum is accumulated in double.
struct RowStats {
  double lse = 0.0;  // log-sum-exp of the logits
  double sum = 0.0;  // sum of exp(logit - max)
};
RowStats exponentiate_row(float* row, i64 V) {
  float row_max = detail::kNegInf;
#pragma omp simd reduction(max : row_max)
  for (i64 c = 0; c < V; ++c) row_max = std::max(row_max, row[c]);
  const double sum = detail::exp_shifted_sum_double(row, V, row_max);
  return {static_cast<double>(row_max) + std::log(sum), sum};
}

}  // namespace

i64 lm_head_chunk_rows(i64 V) {
  return std::max<i64>(1, kMaxChunkBytes / (std::max<i64>(V, 1) * static_cast<i64>(sizeof(float))));
}

namespace {

// The GEMMs of one input precision: fp32 operands, or bf16 operands with fp32 accumulation.
void chunk_gemm(bool ta, bool tb, i64 M, i64 N, i64 K, const float* A, i64 lda, const float* B,
                i64 ldb, float beta, float* C, i64 ldc) {
  gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
void chunk_gemm(bool ta, bool tb, i64 M, i64 N, i64 K, const bf16* A, i64 lda, const bf16* B,
                i64 ldb, float beta, float* C, i64 ldc) {
  gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// Tin = float: the fp32 kernel. Tin = bf16: logits rounded to bf16 after the GEMM (a bf16
// lm_head's output), dlogits rounded to bf16 before the gradient GEMMs, dhidden rounded once.
template <typename Tin>
CrossEntropyResult fused_cross_entropy(const Tin* hidden, const Tin* w, const std::int64_t* labels,
                                       i64 N, i64 d, i64 V, float z_weight, float grad_scale,
                                       Tin* dhidden, float* dw, i64 chunk_rows) {
  constexpr bool kBf16 = std::is_same_v<Tin, bf16>;
  TANDEM_CHECK(N >= 0 && d > 0 && V > 0, "cross_entropy: bad sizes N={} d={} V={}", N, d, V);
  TANDEM_CHECK(chunk_rows > 0, "cross_entropy: chunk_rows {} must be positive", chunk_rows);
  CrossEntropyResult result;
  for (i64 n = 0; n < N; ++n) {
    TANDEM_CHECK(labels[n] == core::kIgnoreIndex || (labels[n] >= 0 && labels[n] < V),
                 "cross_entropy: label {} at position {} is neither in [0, {}) nor {}", labels[n],
                 n, V, core::kIgnoreIndex);
    if (labels[n] != core::kIgnoreIndex) ++result.count;
  }
  const bool want_grads = dhidden != nullptr || dw != nullptr;
  const i64 chunk = std::min(std::max<i64>(N, 1), chunk_rows);
  std::vector<float> logits(static_cast<size_t>(chunk * V));
  std::vector<bf16> dlogits_bf16(kBf16 && want_grads ? static_cast<size_t>(chunk * V) : 0);
  std::vector<float> dhidden_f32(kBf16 && dhidden ? static_cast<size_t>(chunk * d) : 0);
  std::vector<double> row_ce(static_cast<size_t>(chunk));
  std::vector<double> row_z(static_cast<size_t>(chunk));
  for (i64 n0 = 0; n0 < N; n0 += chunk) {
    const i64 nc = std::min(chunk, N - n0);
    const Tin* hidden_chunk = hidden + n0 * d;
    const bool any_label = std::any_of(labels + n0, labels + n0 + nc,
                                       [](std::int64_t l) { return l != core::kIgnoreIndex; });
    if (!any_label) {  // nothing to learn here: zero gradient rows, dw untouched
      if (dhidden != nullptr) std::fill_n(dhidden + n0 * d, nc * d, Tin{});
      continue;
    }
    chunk_gemm(false, true, nc, V, d, hidden_chunk, d, w, d, 0.0f, logits.data(), V);
    if constexpr (kBf16) round_to_bf16(logits.data(), nc * V);
#pragma omp parallel for schedule(static)
    for (i64 r = 0; r < nc; ++r) {
      float* row = logits.data() + r * V;
      const std::int64_t label = labels[n0 + r];
      row_ce[r] = 0.0;
      row_z[r] = 0.0;
      if (label == core::kIgnoreIndex) {
        if (want_grads) std::fill_n(row, V, 0.0f);
        continue;
      }
      const float label_logit = row[label];
      const RowStats stats = exponentiate_row(row, V);
      row_ce[r] = stats.lse - static_cast<double>(label_logit);
      row_z[r] = stats.lse * stats.lse;
      if (!want_grads) continue;
      // d/dlogit of grad_scale * (lse - logit[label] + z * lse^2)
      //   = grad_scale * (softmax * (1 + 2 z lse) - onehot); softmax = row / sum.
      const float coef =
          static_cast<float>(static_cast<double>(grad_scale) *
                             (1.0 + 2.0 * static_cast<double>(z_weight) * stats.lse) / stats.sum);
#pragma omp simd
      for (i64 c = 0; c < V; ++c) row[c] *= coef;
      row[label] -= grad_scale;
    }
    for (i64 r = 0; r < nc; ++r) {  // fixed order: deterministic sums
      result.ce_sum += row_ce[r];
      result.z_sum += row_z[r];
    }
    if (!want_grads) continue;
    if constexpr (kBf16) {
      to_bf16(logits.data(), dlogits_bf16.data(), nc * V);
      if (dhidden != nullptr) {
        gemm_bf16(false, false, nc, d, V, dlogits_bf16.data(), V, w, d, 0.0f, dhidden_f32.data(),
                  d);
        to_bf16(dhidden_f32.data(), dhidden + n0 * d, nc * d);
      }
      if (dw != nullptr)
        gemm_bf16(true, false, V, d, nc, dlogits_bf16.data(), V, hidden_chunk, d, 1.0f, dw, d);
    } else {
      if (dhidden != nullptr)
        gemm(false, false, nc, d, V, 1.0f, logits.data(), V, w, d, 0.0f, dhidden + n0 * d, d);
      if (dw != nullptr)
        gemm(true, false, V, d, nc, 1.0f, logits.data(), V, hidden_chunk, d, 1.0f, dw, d);
    }
  }
  return result;
}

}  // namespace

CrossEntropyResult lm_head_cross_entropy(const float* hidden, const float* w,
                                         const std::int64_t* labels, i64 N, i64 d, i64 V,
                                         float z_weight, float grad_scale, float* dhidden,
                                         float* dw) {
  return lm_head_cross_entropy_chunked(hidden, w, labels, N, d, V, z_weight, grad_scale, dhidden,
                                       dw, lm_head_chunk_rows(V));
}

CrossEntropyResult lm_head_cross_entropy(const bf16* hidden, const bf16* w,
                                         const std::int64_t* labels, i64 N, i64 d, i64 V,
                                         float z_weight, float grad_scale, bf16* dhidden,
                                         float* dw) {
  return fused_cross_entropy(hidden, w, labels, N, d, V, z_weight, grad_scale, dhidden, dw,
                             lm_head_chunk_rows(V));
}

CrossEntropyResult lm_head_cross_entropy_chunked(const float* hidden, const float* w,
                                                 const std::int64_t* labels, i64 N, i64 d, i64 V,
                                                 float z_weight, float grad_scale, float* dhidden,
                                                 float* dw, i64 chunk_rows) {
  return fused_cross_entropy(hidden, w, labels, N, d, V, z_weight, grad_scale, dhidden, dw,
                             chunk_rows);
}

}  // namespace tandem::kernels::cpu
