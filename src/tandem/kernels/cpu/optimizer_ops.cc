// The optimiser's arithmetic on the CPU: the deterministic sum of squares behind gradient norms
// and the AdamW element update. This file is compiled without FMA contraction (CMakeLists.txt):
// the update reproduces its reference's AdamW (torch's or OLMo-core's) operation by operation.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

// Chunk boundaries depend only on the size, never on the number of threads.
constexpr i64 kChunk = 1 << 14;
constexpr int kLanes = 8;

double chunk_sum_of_squares(const float* x, i64 n) {
  // Eight independent accumulators in a fixed lane order: vectorisable without reassociation.
  double acc[kLanes] = {};
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      double v = x[i + l];
      acc[l] += v * v;
    }
  for (; i < n; ++i) {
    double v = x[i];
    acc[0] += v * v;
  }
  double s = 0.0;
  for (double a : acc) s += a;
  return s;
}

}  // namespace

double sum_of_squares(const float* x, i64 n) {
  if (n <= 0) return 0.0;
  const i64 chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 1) return chunk_sum_of_squares(x, n);
  std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (i64 c = 0; c < chunks; ++c) {
    const i64 lo = c * kChunk;
    partial[static_cast<std::size_t>(c)] = chunk_sum_of_squares(x + lo, std::min(kChunk, n - lo));
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

namespace {

// torch's lerp kernel: m + w * (g - m) for w < 0.5, else g - (g - m) * (1 - w), one fused
// multiply-add each (`one_minus_w` is fp32 1 - w).
float torch_lerp(float m, float g, float w, float one_minus_w) {
  const float d = g - m;
  return w < 0.5f ? std::fma(w, d, m) : std::fma(-d, one_minus_w, g);
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, i64 n, const AdamWConstants& c) {
#pragma omp parallel for schedule(static)
  for (i64 k = 0; k < n; ++k) {
    float pk = p[k];
    const float gk = g[k];
    if (c.decay) pk = pk * c.decay_factor;
    float mk = 0.0f, vk = 0.0f;
    switch (c.arithmetic) {
      // OLMo-core's foreach ops: _foreach_mul_, then _foreach_add_ of a _foreach_mul.
      case AdamWArithmetic::olmo_core_foreach:
        mk = m[k] * c.beta1 + gk * c.one_minus_beta1;
        vk = v[k] * c.beta2 + (gk * gk) * c.one_minus_beta2;
        break;
      // OLMo-core's adamw_step: lerp_, mul_ then add_(g * g, alpha) (a fused add).
      case AdamWArithmetic::olmo_core_single:
        mk = torch_lerp(m[k], gk, c.one_minus_beta1, c.beta1);
        vk = std::fma(gk * gk, c.one_minus_beta2, v[k] * c.beta2);
        break;
      // torch's AdamW: lerp_, mul_ then addcmul_ (a fused (value * g) * g + v).
      case AdamWArithmetic::torch_adamw:
        mk = torch_lerp(m[k], gk, c.one_minus_beta1, c.beta1);
        vk = std::fma(c.one_minus_beta2 * gk, gk, v[k] * c.beta2);
        break;
    }
    const float denom = std::sqrt(vk) / c.bias_correction2_sqrt + c.eps;
    // torch's addcdiv_: p + (value * m) / denom; OLMo-core's p + (m / denom) * value.
    p[k] = c.arithmetic == AdamWArithmetic::torch_adamw ? pk + c.neg_step_size * mk / denom
                                                        : pk + (mk / denom) * c.neg_step_size;
    m[k] = mk;
    v[k] = vk;
  }
}

}  // namespace tandem::kernels::cpu
