// RoPE tables, NeoX "rotate_half" layout: for i < D/2 the pair (x[i], x[i + D/2]) at position p is
// rotated by the angle p * inv_freq[i]. Tables are [positions, D/2], computed as HF does (fp32
// inv_freq, fp32 product p * inv_freq, then cos/sin, then times the attention factor in fp32).
//
// The frequencies: plain RoPE has inv_freq[i] = theta^(-2i/D) and attention factor 1; YaRN
// (long-context scaling) blends those with inv_freq / factor along a ramp over the dimensions and
// scales cos/sin by an attention factor (so q.k by its square). Host memory; the model uploads the
// tables to its backend.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::kernels {

struct RopeFrequencies {
  std::vector<float> inv_freq;  // [D / 2]
  double attention_factor = 1.0;
};
RopeFrequencies rope_default_frequencies(std::int64_t head_dim, double theta);
// Linear position interpolation: the plain frequencies divided by factor (in fp32).
RopeFrequencies rope_linear_frequencies(std::int64_t head_dim, double theta, double factor);
// YaRN as two references compute it; they differ only in rounding-level details and in where the
// ramp's upper end is clamped (transformers: D - 1, OLMo-core: D/2 - 1).
enum class YarnFormula {
  kTransformers,  // transformers' _compute_yarn_parameters
  kOlmoCore,      // OLMo-core's YaRNRoPEScalingConfig.compute_scaled_inv_freq
};
struct YarnParameters {
  double factor = 1.0;                      // context extension (>= 1)
  std::int64_t original_max_positions = 0;  // pre-extension context length
  double beta_fast = 32.0;                  // ramp start (rotations)
  double beta_slow = 1.0;                   // ramp end (rotations)
  double attention_factor = 1.0;            // cos/sin scale, already resolved by the caller
  bool truncate = true;                     // floor/ceil the ramp bounds (transformers only)
  YarnFormula formula = YarnFormula::kTransformers;
};
RopeFrequencies rope_yarn_frequencies(std::int64_t head_dim, double theta, const YarnParameters& p);

struct RopeTable {
  std::int64_t max_positions = 0;
  std::int64_t head_dim = 0;
  std::vector<float> cos;  // [max_positions, head_dim / 2]
  std::vector<float> sin;
};
RopeTable make_rope_table(std::int64_t max_positions, std::int64_t head_dim,
                          const RopeFrequencies& frequencies);
// Plain RoPE: make_rope_table(P, D, rope_default_frequencies(D, theta)).
RopeTable make_rope_table(std::int64_t max_positions, std::int64_t head_dim, double theta);
}  // namespace tandem::kernels
