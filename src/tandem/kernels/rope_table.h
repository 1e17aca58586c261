// RoPE tables, NeoX "rotate_half" layout: for i < D/2 the pair (x[i], x[i + D/2]) of position p is
// rotated by the angle p * inv_freq[i], inv_freq[i] = theta^(-2i/D), computed as HF does (fp32
// inv_freq, fp32 product, then cos/sin). Host memory; the model uploads them to its backend.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::kernels {

struct RopeTable {
  std::int64_t max_positions = 0;
  std::int64_t head_dim = 0;
  std::vector<float> cos;  // [max_positions, head_dim / 2]
  std::vector<float> sin;
};

RopeTable make_rope_table(std::int64_t max_positions, std::int64_t head_dim, double theta);

}  // namespace tandem::kernels
