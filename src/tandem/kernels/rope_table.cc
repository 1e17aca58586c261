// RoPE tables (cos and sin of position x inverse frequency), computed on the host with HF's fp32
// numerics and uploaded by the model to its backend. Backend-independent: the same tables drive the
// CPU and CUDA rotations.
#include "tandem/kernels/rope_table.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem::kernels {

using i64 = std::int64_t;

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

}  // namespace tandem::kernels
