#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                i64 rows, i64 d, double eps) {
  std::vector<double> y(x.size());
  for (i64 r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (i64 c = 0; c < d; ++c) ss += x[r * d + c] * x[r * d + c];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (i64 c = 0; c < d; ++c) y[r * d + c] = w[c] * x[r * d + c] * inv;
  }
  return y;
}

TEST(RMSNorm, ForwardMatchesDoubleReference) {
  for (i64 d : {13, 39, 512}) {
    const i64 rows = 7;
    const float eps = 1e-6f;
    auto x = random_floats(rows * d, 1, 2.0f);
    auto w = random_floats(d, 2);
    std::vector<float> y(rows * d), rstd(rows);
    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, d, eps);
    auto ref = rmsnorm_ref(to_double(x), to_double(w), rows, d, eps);
    EXPECT_LT(max_scaled_error(y, ref), kForwardTolerance) << d;
    for (i64 r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (i64 c = 0; c < d; ++c) ss += double(x[r * d + c]) * x[r * d + c];
      EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(ss / d + eps), 1e-6 / std::sqrt(ss / d + eps));
    }
  }
}

TEST(RMSNorm, EpsilonMattersForTinyRows) {
  const i64 d = 4;
  std::vector<float> x(d, 0.0f), w(d, 1.0f), y(d), rstd(1);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), 1, d, 1e-5f);
  EXPECT_FLOAT_EQ(rstd[0], 1.0f / std::sqrt(1e-5f));
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  const i64 rows = 7, d = 13;
  const float eps = 1e-5f;
  auto x = random_floats(rows * d, 3);
  auto w = random_floats(d, 4);
  auto dy = random_floats(rows * d, 5);
  const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  auto num_dx = numeric_gradient(
      [&](const auto& xv) { return dot(rmsnorm_ref(xv, wd, rows, d, eps), dyd); }, xd);
  auto num_dw = numeric_gradient(
      [&](const auto& wv) { return dot(rmsnorm_ref(xd, wv, rows, d, eps), dyd); }, wd);
  std::vector<float> y(rows * d), rstd(rows), dx(rows * d, 7.0f), dw(d, 0.0f);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, d, eps);
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, d);
  EXPECT_LT(max_scaled_gradient_error(dx, num_dx), kGradTolerance);
  EXPECT_LT(max_scaled_gradient_error(dw, num_dw), kGradTolerance);
  // dw accumulates; dx is overwritten.
  auto dx1 = dx;
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, d);
  EXPECT_EQ(dx, dx1);
  EXPECT_LT(max_scaled_gradient_error(dw,
                                      [&] {
                                        auto twice = num_dw;
                                        for (auto& v : twice) v *= 2;
                                        return twice;
                                      }()),
            kGradTolerance);
}

}  // namespace
}  // namespace tandem::kernels::cpu
