// Rotary position embedding, NeoX "rotate_half" layout, with HF's fp32 table numerics; plain RoPE
// and YaRN frequencies.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

// Rounds to fp32 through memory: keeps g++ from contracting a*b + c*d into an FMA, so each step
// rounds as torch's separate tensor ops do.
float f32(float x) {
  volatile float v = x;
  return v;
}

void check_rope_args(i64 head_dim, double theta) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim {} must be positive and even",
               head_dim);
  TANDEM_CHECK(theta > 0.0, "rope: theta {} must be positive", theta);
}

// theta^(2i/D) for i < D/2, as torch evaluates `theta ** (arange(0, D, 2).float() / D)`: theta and
// the exponent rounded to fp32, pow within 1 ulp; pow in double rounded once gives the correctly
// rounded fp32 value, which is what torch returns.
std::vector<float> rope_powers(i64 head_dim, double theta) {
  const float theta_f = static_cast<float>(theta);
  std::vector<float> powers(static_cast<size_t>(head_dim / 2));
  for (i64 i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    powers[i] =
        static_cast<float>(std::pow(static_cast<double>(theta_f), static_cast<double>(exponent)));
  }
  return powers;
}

// The dimension (in [0, D)) whose wavelength makes `rotations` turns over `context` positions.
double yarn_correction_dim(double rotations, i64 head_dim, double theta, i64 context) {
  return (static_cast<double>(head_dim) *
          std::log(static_cast<double>(context) / (rotations * 2 * std::numbers::pi))) /
         (2 * std::log(theta));
}

}  // namespace

RopeFrequencies rope_default_frequencies(i64 head_dim, double theta) {
  check_rope_args(head_dim, theta);
  RopeFrequencies f;
  for (float p : rope_powers(head_dim, theta)) f.inv_freq.push_back(1.0f / p);
  return f;
}

RopeFrequencies rope_linear_frequencies(i64 head_dim, double theta, double factor) {
  TANDEM_CHECK(factor > 0.0, "rope: linear scaling factor {} must be positive", factor);
  RopeFrequencies f = rope_default_frequencies(head_dim, theta);
  for (float& v : f.inv_freq) v /= static_cast<float>(factor);
  return f;
}

RopeFrequencies rope_yarn_frequencies(i64 head_dim, double theta, const YarnParameters& p) {
  check_rope_args(head_dim, theta);
  TANDEM_CHECK(p.factor > 0.0, "rope: YaRN factor {} must be positive", p.factor);
  TANDEM_CHECK(p.original_max_positions > 0,
               "rope: YaRN original_max_position_embeddings {} must be positive",
               p.original_max_positions);
  TANDEM_CHECK(p.beta_fast > 0.0 && p.beta_slow > 0.0,
               "rope: YaRN beta_fast {} and beta_slow {} must be positive", p.beta_fast,
               p.beta_slow);
  const i64 half = head_dim / 2;
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
    for (i64 i = 0; i < half; ++i) {
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
    for (i64 i = 0; i < half; ++i) {
      const float extrapolation = 1.0f / powers[i];
      const float interpolation = extrapolation / factor;
      const float ramp = std::clamp(f32(static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      f.inv_freq[i] = f32(interpolation * ramp) + f32(extrapolation * f32(1.0f - ramp));
    }
  }
  return f;
}

RopeTable make_rope_table(i64 max_positions, i64 head_dim, const RopeFrequencies& frequencies) {
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim {} must be positive and even",
               head_dim);
  TANDEM_CHECK(max_positions >= 0, "rope: max_positions {} is negative", max_positions);
  const i64 half = head_dim / 2;
  TANDEM_CHECK(static_cast<i64>(frequencies.inv_freq.size()) == half,
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
  for (i64 p = 0; p < max_positions; ++p) {
    for (i64 i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      table.cos[p * half + i] = scale == 1.0f ? c : c * scale;
      table.sin[p * half + i] = scale == 1.0f ? s : s * scale;
    }
  }
  return table;
}

RopeTable make_rope_table(i64 max_positions, i64 head_dim, double theta) {
  return make_rope_table(max_positions, head_dim, rope_default_frequencies(head_dim, theta));
}

namespace {

void check_table(const RopeTable& table, i64 B, i64 T, i64 D, const std::int64_t* positions) {
  TANDEM_CHECK(table.head_dim == D, "rope: table head_dim {} != tensor head_dim {}", table.head_dim,
               D);
  if (!positions) {
    TANDEM_CHECK(T <= table.max_positions,
                 "rope: sequence length {} exceeds the table's {} positions", T,
                 table.max_positions);
    return;
  }
  for (i64 i = 0; i < B * T; ++i)
    TANDEM_CHECK(positions[i] >= 0 && positions[i] < table.max_positions,
                 "rope: position {} of token {} is outside the table's [0, {})", positions[i], i,
                 table.max_positions);
}

// sign = +1: forward rotation; sign = -1: its transpose (the inverse), used by backward.
void rotate(float* x, i64 B, i64 T, i64 H, i64 D, const RopeTable& table, float sign,
            const std::int64_t* positions) {
  check_table(table, B, T, D, positions);
  const i64 half = D / 2;
#pragma omp parallel for schedule(static)
  for (i64 bt = 0; bt < B * T; ++bt) {
    const i64 pos = positions ? positions[bt] : bt % T;
    const float* c = table.cos.data() + pos * half;
    const float* s = table.sin.data() + pos * half;
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

void rope_forward(float* x, i64 B, i64 T, i64 H, i64 D, const RopeTable& table,
                  const std::int64_t* positions) {
  rotate(x, B, T, H, D, table, 1.0f, positions);
}

void rope_backward(float* dx, i64 B, i64 T, i64 H, i64 D, const RopeTable& table,
                   const std::int64_t* positions) {
  rotate(dx, B, T, H, D, table, -1.0f, positions);
}

}  // namespace tandem::kernels::cpu
