#include <gtest/gtest.h>

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
using kernels::RopeTable;

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

}  // namespace
}  // namespace tandem::kernels::cpu
