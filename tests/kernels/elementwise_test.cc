#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

std::vector<double> swiglu_ref(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> h(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return h;
}

TEST(SwiGLU, ForwardMatchesDoubleReference) {
  const i64 n = 1001;
  auto g = random_floats(n, 1, 4.0f);
  auto u = random_floats(n, 2);
  g[0] = -120.0f;  // exp(-g) overflows: silu -> -0
  g[1] = 95.0f;
  std::vector<float> h(n);
  swiglu_forward(g.data(), u.data(), h.data(), n);
  auto ref = swiglu_ref(to_double(g), to_double(u));
  // Elementwise relative error: one exp (about 1 ulp) and three roundings.
  for (i64 i = 0; i < n; ++i) EXPECT_NEAR(h[i], ref[i], 1e-6 * std::abs(ref[i]) + 1e-30) << i;
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  const i64 n = 37;
  auto g = random_floats(n, 3, 3.0f);
  auto u = random_floats(n, 4);
  auto dh = random_floats(n, 5);
  const auto gd = to_double(g), ud = to_double(u), dhd = to_double(dh);
  auto num_dg = numeric_gradient([&](const auto& gv) { return dot(swiglu_ref(gv, ud), dhd); }, gd);
  auto num_du = numeric_gradient([&](const auto& uv) { return dot(swiglu_ref(gd, uv), dhd); }, ud);
  std::vector<float> dg(n), du(n);
  swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
  EXPECT_LT(max_scaled_gradient_error(dg, num_dg), kGradTolerance);
  EXPECT_LT(max_scaled_gradient_error(du, num_du), kGradTolerance);
}

}  // namespace
}  // namespace tandem::kernels::cpu
