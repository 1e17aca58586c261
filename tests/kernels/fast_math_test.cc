#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>

#include "tandem/kernels/cpu/fast_math.h"

namespace tandem::kernels::cpu::detail {
namespace {

// The vectorised exp must be within 1 ulp of the correctly rounded value, subnormals included,
// and handle the special values that the softmax kernels rely on.
TEST(FastMath, ExpIsWithinOneUlp) {
  int max_ulp = 0;
  for (float x = -110.0f; x < 88.7f; x += 3.3e-3f) {
    const float ours = exp_f32(x);
    const float ref = static_cast<float>(std::exp(static_cast<double>(x)));
    const int ulp = std::abs(std::bit_cast<std::int32_t>(ours) - std::bit_cast<std::int32_t>(ref));
    max_ulp = std::max(max_ulp, ulp);
  }
  EXPECT_LE(max_ulp, 1);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f32(-200.0f), 0.0f);
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(exp_f32(89.5f)));
  EXPECT_TRUE(std::isinf(exp_f32(INFINITY)));
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
}

TEST(FastMath, ShiftedSumsMatchScalar) {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 5.0f;
  auto y = x;
  const double sum = exp_shifted_sum_double(y.data(), static_cast<std::int64_t>(y.size()), 2.0f);
  double ref = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], exp_f32(x[i] - 2.0f));
    ref += std::exp(static_cast<double>(x[i]) - 2.0);
  }
  EXPECT_NEAR(sum, ref, 1e-6 * ref);
}

}  // namespace
}  // namespace tandem::kernels::cpu::detail
