// Rotary position embedding, NeoX "rotate_half" layout, with HF's fp32 table numerics.
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

RopeTable make_rope_table(i64 max_positions, i64 head_dim, double theta) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim {} must be positive and even",
               head_dim);
  TANDEM_CHECK(max_positions >= 0, "rope: max_positions {} is negative", max_positions);
  TANDEM_CHECK(theta > 0.0, "rope: theta {} must be positive", theta);
  const i64 half = head_dim / 2;
  RopeTable table;
  table.max_positions = max_positions;
  table.head_dim = head_dim;
  table.cos.resize(static_cast<size_t>(max_positions * half));
  table.sin.resize(static_cast<size_t>(max_positions * half));
  // HF: inv_freq = 1 / (theta ** (arange(0, D, 2).float() / D)), every step in fp32. torch rounds
  // theta and the exponent to fp32 and evaluates pow to within 1 ulp; evaluating it in double and
  // rounding once gives the correctly rounded fp32 value, which is what torch returns.
  const float theta_f = static_cast<float>(theta);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (i64 i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power =
        static_cast<float>(std::pow(static_cast<double>(theta_f), static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / power;
  }
  // freqs = position (fp32) * inv_freq in fp32; cos/sin of that fp32 angle, correctly rounded.
#pragma omp parallel for schedule(static)
  for (i64 p = 0; p < max_positions; ++p) {
    for (i64 i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      table.cos[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table.sin[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

namespace {

void check_table(const RopeTable& table, i64 T, i64 D) {
  TANDEM_CHECK(table.head_dim == D, "rope: table head_dim {} != tensor head_dim {}", table.head_dim,
               D);
  TANDEM_CHECK(T <= table.max_positions,
               "rope: sequence length {} exceeds the table's {} positions", T, table.max_positions);
}

// sign = +1: forward rotation; sign = -1: its transpose (the inverse), used by backward.
void rotate(float* x, i64 B, i64 T, i64 H, i64 D, const RopeTable& table, float sign) {
  check_table(table, T, D);
  const i64 half = D / 2;
#pragma omp parallel for schedule(static)
  for (i64 bt = 0; bt < B * T; ++bt) {
    const i64 t = bt % T;
    const float* c = table.cos.data() + t * half;
    const float* s = table.sin.data() + t * half;
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

void rope_forward(float* x, i64 B, i64 T, i64 H, i64 D, const RopeTable& table) {
  rotate(x, B, T, H, D, table, 1.0f);
}

void rope_backward(float* dx, i64 B, i64 T, i64 H, i64 D, const RopeTable& table) {
  rotate(dx, B, T, H, D, table, -1.0f);
}

}  // namespace tandem::kernels::cpu
