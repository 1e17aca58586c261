// RMSNorm in HF's order: rstd from mean(x^2) in fp32, normalise, then multiply by the weight.
#include <algorithm>
#include <cmath>

#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, i64 rows, i64 d,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    // The sum of squares is accumulated in double (deterministic lane order) and rounded once, so
    // the fp32 mean is as close to exact as torch's pairwise fp32 sum or closer.
    double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
    for (i64 c = 0; c < d; ++c) sum_sq += static_cast<double>(xr[c] * xr[c]);
    const float variance = static_cast<float>(sum_sq / static_cast<double>(d));
    const float inv = 1.0f / std::sqrt(variance + eps);
    rstd[r] = inv;
#pragma omp simd
    for (i64 c = 0; c < d; ++c) yr[c] = w[c] * (xr[c] * inv);
  }
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                      float* dw, i64 rows, i64 d) {
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
#pragma omp parallel for schedule(static)
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float* dxr = dx + r * d;
    const float inv = rstd[r];
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (i64 c = 0; c < d; ++c) dot += static_cast<double>(dyr[c] * w[c] * (xr[c] * inv));
    const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
#pragma omp simd
    for (i64 c = 0; c < d; ++c) dxr[c] = inv * (dyr[c] * w[c] - (xr[c] * inv) * mean_dot);
  }
  if (dw == nullptr) return;
  // dw: each thread owns a block of columns and sums the rows in order (thread-count independent).
  constexpr i64 kColumnBlock = 64;
  const i64 blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (i64 block = 0; block < blocks; ++block) {
    const i64 c0 = block * kColumnBlock;
    const i64 c1 = std::min(d, c0 + kColumnBlock);
    double acc[kColumnBlock] = {};
    for (i64 r = 0; r < rows; ++r) {
      const float* xr = x + r * d;
      const float* dyr = dy + r * d;
      const float inv = rstd[r];
#pragma omp simd
      for (i64 c = c0; c < c1; ++c) acc[c - c0] += static_cast<double>(dyr[c] * (xr[c] * inv));
    }
    for (i64 c = c0; c < c1; ++c) dw[c] += static_cast<float>(acc[c - c0]);
  }
}

}  // namespace tandem::kernels::cpu
