// Elementwise ops: SwiGLU gate and the residual add.
#include "tandem/kernels/cpu/fast_math.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void swiglu_forward(const float* g, const float* u, float* h, i64 n) {
#pragma omp parallel for simd schedule(static)
  for (i64 i = 0; i < n; ++i) {
    // torch's silu: x / (1 + exp(-x)).
    const float silu = g[i] / (1.0f + detail::exp_f32(-g[i]));
    h[i] = silu * u[i];
  }
}

void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, i64 n) {
#pragma omp parallel for simd schedule(static)
  for (i64 i = 0; i < n; ++i) {
    const float sig = 1.0f / (1.0f + detail::exp_f32(-g[i]));
    const float silu = g[i] * sig;
    // d silu / dg = sig * (1 + g * (1 - sig)).
    dg[i] = dh[i] * u[i] * (sig * (1.0f + g[i] * (1.0f - sig)));
    du[i] = dh[i] * silu;
  }
}

void add(const float* a, const float* b, float* y, i64 n) {
#pragma omp parallel for simd schedule(static)
  for (i64 i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace tandem::kernels::cpu
