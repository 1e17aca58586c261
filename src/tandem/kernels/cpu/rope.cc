// Rotary position embedding, NeoX "rotate_half" layout, over host tables from kernels/rope_table.h.
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

// sign = +1: forward rotation; sign = -1: its transpose (the inverse), used by backward.
void rotate(float* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin, float sign,
            const std::int64_t* positions) {
  const i64 half = D / 2;
#pragma omp parallel for schedule(static)
  for (i64 bt = 0; bt < B * T; ++bt) {
    const i64 pos = positions ? positions[bt] : bt % T;
    const float* c = cos + pos * half;
    const float* s = sin + pos * half;
    for (i64 h = 0; h < H; ++h) {
      float* x1 = x + (bt * H + h) * D;
      float* x2 = x1 + half;
#pragma omp simd
      for (i64 i = 0; i < half; ++i) {
        const float a = x1[i];
        const float b = x2[i];
        const float si = sign * s[i];
        // HF: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
        x1[i] = a * c[i] + (-b) * si;
        x2[i] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
                  const std::int64_t* positions) {
  rotate(x, B, T, H, D, cos, sin, 1.0f, positions);
}

void rope_backward(float* dx, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
                   const std::int64_t* positions) {
  rotate(dx, B, T, H, D, cos, sin, -1.0f, positions);
}

}  // namespace tandem::kernels::cpu
