// Row-wise ops: scaling, gathering rows, and the log-probability of one target per logits row.
#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void scale(float* x, float factor, i64 n) {
#pragma omp parallel for schedule(static)
  for (i64 i = 0; i < n; ++i) x[i] *= factor;
}

namespace {
template <typename T>
void gather(const T* src, i64 src_rows, i64 d, const std::int64_t* index, i64 n, T* dst) {
  for (i64 i = 0; i < n; ++i)
    TANDEM_CHECK(index[i] >= 0 && index[i] < src_rows, "gather_rows: row {} outside [0, {})",
                 index[i], src_rows);
#pragma omp parallel for schedule(static)
  for (i64 i = 0; i < n; ++i) std::copy_n(src + index[i] * d, d, dst + i * d);
}
}  // namespace

void gather_rows(const float* src, i64 src_rows, i64 d, const std::int64_t* index, i64 n,
                 float* dst) {
  gather(src, src_rows, d, index, n, dst);
}

void gather_rows(const std::uint16_t* src, i64 src_rows, i64 d, const std::int64_t* index, i64 n,
                 std::uint16_t* dst) {
  gather(src, src_rows, d, index, n, dst);
}

void token_log_probs(const float* logits, const std::int64_t* targets, i64 n, i64 V, double* out) {
  for (i64 i = 0; i < n; ++i)
    TANDEM_CHECK(targets[i] >= 0 && targets[i] < V, "token_log_probs: target {} outside [0, {})",
                 targets[i], V);
#pragma omp parallel for schedule(static)
  for (i64 i = 0; i < n; ++i) {
    const float* row = logits + i * V;
    float max_v = row[0];
    for (i64 v = 1; v < V; ++v) max_v = std::max(max_v, row[v]);
    double sum = 0.0;
    for (i64 v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - max_v);
    out[i] = static_cast<double>(row[targets[i]]) - max_v - std::log(sum);
  }
}

}  // namespace tandem::kernels::cpu
