#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cpu/cpu_backend.h"
#include "tandem/kernels/cpu/ops.h"
#include "tandem/kernels/rope_table.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;
using kernels::make_rope_table;
using kernels::rope_yarn_frequencies;
using kernels::RopeFrequencies;
using kernels::RopeTable;
using kernels::YarnFormula;
using kernels::YarnParameters;

TEST(Rope, TableFollowsTheFp32Recipe) {
  const i64 P = 300, D = 14;
  const double theta = 500000.0;
  auto table = make_rope_table(P, D, theta);
  ASSERT_EQ(table.cos.size(), static_cast<std::size_t>(P * D / 2));
  for (i64 i = 0; i < D / 2; ++i) {
    const double exact_inv = std::pow(theta, -2.0 * i / D);
    for (i64 p = 0; p < P; ++p) {
      // The fp32 recipe perturbs the angle relatively by: the exponent 2i/D rounded to fp32 (times
      // ln(theta) = 13.1, so up to 8e-7), inv_freq and the product each rounded (6e-8 each).
      const double exact = p * exact_inv;
      const double tol = 1e-6 * exact + 1e-7;
      EXPECT_NEAR(table.cos[p * D / 2 + i], std::cos(exact), tol) << p << "," << i;
      EXPECT_NEAR(table.sin[p * D / 2 + i], std::sin(exact), tol) << p << "," << i;
    }
  }
  // Position 0 is the identity rotation.
  for (i64 i = 0; i < D / 2; ++i) {
    EXPECT_EQ(table.cos[i], 1.0f);
    EXPECT_EQ(table.sin[i], 0.0f);
  }
}

TEST(Rope, BadArgumentsAreErrors) {
  EXPECT_THROW(make_rope_table(8, 7, 10000.0), tandem::core::Error);
  // The backend checks the tables against the tensor.
  auto table = make_rope_table(4, 8, 10000.0);
  CpuBackend backend;
  Tensor cos(table.cos.data(), DType::f32, Shape{4, 4}),
      sin(table.sin.data(), DType::f32, Shape{4, 4});
  std::vector<float> x(1 * 5 * 1 * 8);
  EXPECT_THROW(backend.rope_forward(Tensor(x.data(), DType::f32, Shape{1, 5, 1, 8}), cos, sin),
               tandem::core::Error);  // T > positions
  EXPECT_THROW(backend.rope_forward(Tensor(x.data(), DType::f32, Shape{1, 4, 1, 6}), cos, sin),
               tandem::core::Error);  // head_dim mismatch
}

// NeoX layout reference in double, driven by the (fp32) table values.
std::vector<double> rope_ref(const std::vector<double>& x, i64 B, i64 T, i64 H, i64 D,
                             const RopeTable& table) {
  std::vector<double> y(x.size());
  const i64 half = D / 2;
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < T; ++t)
      for (i64 h = 0; h < H; ++h) {
        const i64 base = ((b * T + t) * H + h) * D;
        for (i64 i = 0; i < half; ++i) {
          const double c = table.cos[t * half + i], s = table.sin[t * half + i];
          y[base + i] = x[base + i] * c - x[base + i + half] * s;
          y[base + i + half] = x[base + i + half] * c + x[base + i] * s;
        }
      }
  return y;
}

TEST(Rope, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const i64 B = 2, T = 7, H = 3, D = 10;
  auto table = make_rope_table(9, D, 10000.0);
  auto x = random_floats(B * T * H * D, 1);
  auto y = x;
  rope_forward(y.data(), B, T, H, D, table.cos.data(), table.sin.data());
  EXPECT_LT(max_scaled_error(y, rope_ref(to_double(x), B, T, H, D, table)), kForwardTolerance);

  auto dy = random_floats(x.size(), 2);
  auto numeric = numeric_gradient(
      [&](const auto& xv) { return dot(rope_ref(xv, B, T, H, D, table), to_double(dy)); },
      to_double(x));
  auto dx = dy;
  rope_backward(dx.data(), B, T, H, D, table.cos.data(), table.sin.data());
  EXPECT_LT(max_scaled_gradient_error(dx, numeric), kGradTolerance);

  // backward is the inverse rotation: it undoes forward.
  rope_backward(y.data(), B, T, H, D, table.cos.data(), table.sin.data());
  EXPECT_LT(max_scaled_error(y, to_double(x)), 1e-6);
}

// Explicit positions (documents restarting at 0) rotate like the table rows they name.
TEST(Rope, ExplicitPositionsSelectTableRows) {
  const i64 B = 1, T = 6, H = 2, D = 4;
  auto table = make_rope_table(8, D, 10000.0);
  auto x = random_floats(B * T * H * D, 3);
  std::vector<std::int64_t> positions = {0, 1, 2, 0, 1, 0};
  auto y = x;
  rope_forward(y.data(), B, T, H, D, table.cos.data(), table.sin.data(), positions.data());
  // Token 3 (position 0) is unrotated; token 4 is rotated like token 1 of a plain pass.
  for (i64 i = 0; i < H * D; ++i) EXPECT_EQ(y[3 * H * D + i], x[3 * H * D + i]);
  std::vector<float> shifted(x.begin() + 4 * H * D, x.begin() + 5 * H * D);
  rope_forward(shifted.data(), 1, 1, H, D, table.cos.data(), table.sin.data(),
               positions.data() + 1);
  for (i64 i = 0; i < H * D; ++i) EXPECT_EQ(y[4 * H * D + i], shifted[i]);
  rope_backward(y.data(), B, T, H, D, table.cos.data(), table.sin.data(), positions.data());
  EXPECT_LT(max_scaled_error(y, to_double(x)), 1e-6);
  // A position outside the tables is an error (the backend checks it before the kernel reads).
  std::vector<std::int64_t> outside = {0, 1, 2, 8, 1, 0};
  CpuBackend backend;
  const Tensor cos(table.cos.data(), DType::f32, Shape{8, D / 2});
  const Tensor sin(table.sin.data(), DType::f32, Shape{8, D / 2});
  EXPECT_THROW(backend.rope_forward(Tensor(y.data(), DType::f32, Shape{B, T, H, D}), cos, sin,
                                    Tensor(outside.data(), DType::i64, Shape{B * T})),
               tandem::core::Error);
}

// YaRN (transformers' formula) in double: ramp between interpolated and original frequencies.
TEST(Rope, YarnFrequenciesFollowTheRamp) {
  const i64 D = 16;
  const double theta = 500000.0, factor = 8.0;
  YarnParameters p;
  p.factor = factor;
  p.original_max_positions = 8192;
  p.attention_factor = 0.1 * std::log(factor) + 1.0;
  RopeFrequencies f = rope_yarn_frequencies(D, theta, p);
  EXPECT_DOUBLE_EQ(f.attention_factor, p.attention_factor);
  // Ramp bounds: floor / ceil of D * ln(L / (2 pi beta)) / (2 ln theta) for beta 32 and 1.
  const auto bound = [&](double beta) {
    return D * std::log(8192.0 / (beta * 2 * M_PI)) / (2 * std::log(theta));
  };
  const double low = std::floor(bound(32)), high = std::ceil(bound(1));
  for (i64 i = 0; i < D / 2; ++i) {
    const double base = std::pow(theta, -2.0 * i / D);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double expected = base / factor * ramp + base * (1 - ramp);
    EXPECT_NEAR(f.inv_freq[i], expected, 2e-6 * expected) << i;
  }
  // Above the ramp the frequencies are the original ones divided by the factor; below, unchanged.
  EXPECT_NEAR(f.inv_freq[D / 2 - 1], std::pow(theta, -2.0 * (D / 2 - 1) / D) / factor, 1e-12);
  EXPECT_NEAR(f.inv_freq[0], 1.0, 0.0);
  // The table carries the attention factor on cos and sin.
  RopeTable table = make_rope_table(3, D, f);
  EXPECT_FLOAT_EQ(table.cos[0], static_cast<float>(p.attention_factor));
  EXPECT_FLOAT_EQ(table.sin[0], 0.0f);
  // OLMo-core's formula clamps the ramp at D/2 - 1 instead of D - 1: equal here (high < D/2).
  p.formula = YarnFormula::kOlmoCore;
  RopeFrequencies g = rope_yarn_frequencies(D, theta, p);
  for (i64 i = 0; i < D / 2; ++i) EXPECT_NEAR(g.inv_freq[i], f.inv_freq[i], 1e-7 * f.inv_freq[i]);
}

}  // namespace
}  // namespace tandem::kernels::cpu
