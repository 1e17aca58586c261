// RoPE tables (cos and sin of position x inverse frequency) for plain, linear and YaRN RoPE,
// computed on the host with HF's fp32 numerics and uploaded by the model to its backend.
// Backend-independent: the same tables drive the CPU and CUDA rotations.
#include "tandem/kernels/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tandem/core/error.h"

namespace tandem::kernels {
using i64 = std::int64_t;

namespace {

// Rounds to fp32 through memory: keeps g++ from contracting a*b + c*d into an FMA, so each step
// rounds as torch's separate tensor ops do.
float f32(float x) {
  volatile float v = x;
  return v;
}

void check_rope_args(std::int64_t head_dim, double theta) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim {} must be positive and even",
               head_dim);
  TANDEM_CHECK(theta > 0.0, "rope: theta {} must be positive", theta);
}

// theta^(2i/D) for i < D/2, as torch evaluates `theta ** (arange(0, D, 2).float() / D)`: theta and
// the exponent rounded to fp32, pow within 1 ulp; pow in double rounded once gives the correctly
// rounded fp32 value, which is what torch returns.
std::vector<float> rope_powers(std::int64_t head_dim, double theta) {
  const float theta_f = static_cast<float>(theta);
  std::vector<float> powers(static_cast<size_t>(head_dim / 2));
  for (std::int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    powers[i] =
        static_cast<float>(std::pow(static_cast<double>(theta_f), static_cast<double>(exponent)));
  }
  return powers;
}

// The dimension (in [0, D)) whose wavelength makes `rotations` turns over `context` positions.
double yarn_correction_dim(double rotations, std::int64_t head_dim, double theta,
                           std::int64_t context) {
  return (static_cast<double>(head_dim) *
          std::log(static_cast<double>(context) / (rotations * 2 * std::numbers::pi))) /
         (2 * std::log(theta));
}

}  // namespace

RopeFrequencies rope_default_frequencies(std::int64_t head_dim, double theta) {
  check_rope_args(head_dim, theta);
  RopeFrequencies f;
  for (float p : rope_powers(head_dim, theta)) f.inv_freq.push_back(1.0f / p);
  return f;
}

RopeFrequencies rope_linear_frequencies(std::int64_t head_dim, double theta, double factor) {
  TANDEM_CHECK(factor > 0.0, "rope: linear scaling factor {} must be positive", factor);
  RopeFrequencies f = rope_default_frequencies(head_dim, theta);
  for (float& v : f.inv_freq) v /= static_cast<float>(factor);
  return f;
}

RopeFrequencies rope_yarn_frequencies(std::int64_t head_dim, double theta,
                                      const YarnParameters& p) {
  check_rope_args(head_dim, theta);
  TANDEM_CHECK(p.factor > 0.0, "rope: YaRN factor {} must be positive", p.factor);
  TANDEM_CHECK(p.original_max_positions > 0,
               "rope: YaRN original_max_position_embeddings {} must be positive",
               p.original_max_positions);
  TANDEM_CHECK(p.beta_fast > 0.0 && p.beta_slow > 0.0,
               "rope: YaRN beta_fast {} and beta_slow {} must be positive", p.beta_fast,
               p.beta_slow);
  const std::int64_t half = head_dim / 2;
  const std::vector<float> powers = rope_powers(head_dim, theta);
  double low = yarn_correction_dim(p.beta_fast, head_dim, theta, p.original_max_positions);
  double high = yarn_correction_dim(p.beta_slow, head_dim, theta, p.original_max_positions);
  const float factor = static_cast<float>(p.factor);
  RopeFrequencies f;
  f.attention_factor = p.attention_factor;
  f.inv_freq.resize(static_cast<size_t>(half));
  if (p.formula == YarnFormula::kTransformers) {
    if (p.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(head_dim - 1));
    if (low == high) high += 0.001;  // transformers: "prevent singularity"
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    for (std::int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp(f32(static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      const float extrapolation = 1.0f / powers[i];
      const float interpolation = 1.0f / f32(factor * powers[i]);
      f.inv_freq[i] = f32(interpolation * f32(1.0f - extrapolation_factor)) +
                      f32(extrapolation * extrapolation_factor);
    }
  } else {
    low = std::max(std::floor(low), 0.0);
    high = std::min(std::ceil(high), static_cast<double>(half - 1));
    const float lo = static_cast<float>(low);
    const float span = static_cast<float>(std::max(high - low, 1e-3));
    for (std::int64_t i = 0; i < half; ++i) {
      const float extrapolation = 1.0f / powers[i];
      const float interpolation = extrapolation / factor;
      const float ramp = std::clamp(f32(static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      f.inv_freq[i] = f32(interpolation * ramp) + f32(extrapolation * f32(1.0f - ramp));
    }
  }
  return f;
}

RopeTable make_rope_table(std::int64_t max_positions, std::int64_t head_dim,
                          const RopeFrequencies& frequencies) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim {} must be positive and even",
               head_dim);
  TANDEM_CHECK(max_positions >= 0, "rope: max_positions {} is negative", max_positions);
  const std::int64_t half = head_dim / 2;
  TANDEM_CHECK(static_cast<std::int64_t>(frequencies.inv_freq.size()) == half,
               "rope: {} frequencies for head_dim {}", frequencies.inv_freq.size(), head_dim);
  RopeTable table;
  table.max_positions = max_positions;
  table.head_dim = head_dim;
  table.cos.resize(static_cast<size_t>(max_positions * half));
  table.sin.resize(static_cast<size_t>(max_positions * half));
  const float* inv_freq = frequencies.inv_freq.data();
  const float scale = static_cast<float>(frequencies.attention_factor);
  // angle = position (fp32) * inv_freq in fp32; cos/sin of that fp32 angle, correctly rounded, then
  // times the attention factor in fp32 (HF: emb.cos() * attention_scaling).
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < max_positions; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      table.cos[p * half + i] = scale == 1.0f ? c : c * scale;
      table.sin[p * half + i] = scale == 1.0f ? s : s * scale;
    }
  }
  return table;
}

RopeTable make_rope_table(std::int64_t max_positions, std::int64_t head_dim, double theta) {
  return make_rope_table(max_positions, head_dim, rope_default_frequencies(head_dim, theta));
}

}  // namespace tandem::kernels
