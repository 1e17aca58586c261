#include "tandem/optim/grad_clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "fixture.h"
#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

// torch.nn.utils.clip_grad_norm_ on three tensors: clipped, not clipped, and max_norm 0.5.
TEST(GradClipParity, MatchesTorchClipGradNorm) {
  nlohmann::json fixture = testing::load_fixture("clip.json");
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<std::vector<float>> grads;
    for (const auto& g : c["grads"]) grads.push_back(testing::floats(g));
    std::vector<kernels::Tensor> views;
    for (auto& g : grads) views.push_back(testing::host_tensor(g));
    const double norm = clip_grad_norm(testing::cpu(), views, c["max_norm"].get<double>());
    // torch accumulates the norm in fp32; ours is double: agreement to fp32 rounding.
    const double want = c["total_norm"].get<double>();
    EXPECT_NEAR(norm, want, 1e-6 * want);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      std::vector<float> ref = testing::floats(c["clipped"][i]);
      for (std::size_t k = 0; k < ref.size(); ++k)
        EXPECT_NEAR(grads[i][k], ref[k], 1e-6 * std::abs(ref[k]) + 1e-30) << i << "," << k;
    }
  }
}

TEST(GradClip, CoefficientAsTorch) {
  EXPECT_DOUBLE_EQ(clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);  // zero gradients: nothing to scale
}

TEST(GradClip, ReportsThePreClipNormAndLeavesSmallGradients) {
  std::vector<float> a = {3.0f, 0.0f}, b = {0.0f, 4.0f};
  std::vector<kernels::Tensor> views = {testing::host_tensor(a), testing::host_tensor(b)};
  EXPECT_DOUBLE_EQ(clip_grad_norm(testing::cpu(), views, 1.0), 5.0);
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(3.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(b[1], static_cast<float>(4.0 / (5.0 + 1e-6)));
  EXPECT_NEAR(global_grad_norm(testing::cpu(), views), 1.0, 1e-6);
  std::vector<float> c = {0.3f, 0.4f};
  std::vector<kernels::Tensor> small = {testing::host_tensor(c)};
  EXPECT_NEAR(clip_grad_norm(testing::cpu(), small, 1.0), 0.5, 1e-7);
  EXPECT_EQ(c[0], 0.3f);  // below max_norm: untouched
  EXPECT_EQ(c[1], 0.4f);
}

TEST(GradClip, NonFiniteNormIsReportedAndNothingScaled) {
  std::vector<float> a = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  std::vector<kernels::Tensor> views = {testing::host_tensor(a)};
  EXPECT_TRUE(std::isinf(clip_grad_norm(testing::cpu(), views, 1.0)));
  EXPECT_EQ(a[0], 1.0f);
  a[1] = std::nanf("");
  EXPECT_TRUE(std::isnan(clip_grad_norm(testing::cpu(), views, 1.0)));
  EXPECT_EQ(a[2], 2.0f);
}

TEST(GradClip, NormIsIndependentOfThreadCountAndAccurate) {
  std::vector<float> big(300001);
  long double exact = 0.0L;
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i)) * (1.0 + i % 7));
    exact += static_cast<long double>(big[i]) * big[i];
  }
  std::vector<kernels::Tensor> views = {testing::host_tensor(big)};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = global_grad_norm(testing::cpu(), views);
  omp_set_num_threads(2);
  const double two = global_grad_norm(testing::cpu(), views);
  omp_set_num_threads(5);
  const double five = global_grad_norm(testing::cpu(), views);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);  // bit-identical
  EXPECT_EQ(one, five);
  EXPECT_NEAR(one, std::sqrt(static_cast<double>(exact)), 1e-12 * one);
}

TEST(GradClip, SumsOfSquaresAreEachTensorsInTheirOrder) {
  std::vector<float> a(40000), b = {3.0f, 4.0f};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.25f;
  std::vector<float> none;
  kernels::Backend& cpu = testing::cpu();
  const std::vector<kernels::Tensor> views = {testing::host_tensor(a), testing::host_tensor(none),
                                              testing::host_tensor(b)};
  const std::vector<double> sums = cpu.sums_of_squares(views);
  ASSERT_EQ(sums.size(), 3u);
  EXPECT_EQ(sums[0], cpu.sum_of_squares(views[0]));
  EXPECT_EQ(sums[1], 0.0);
  EXPECT_EQ(sums[2], 25.0);
  EXPECT_EQ(sum_of_squares(cpu, views), (sums[0] + sums[1]) + sums[2]);
  EXPECT_TRUE(cpu.sums_of_squares({}).empty());
  kernels::Buffer ids = cpu.allocate(kernels::DType::i64, kernels::Shape{2});
  const std::vector<kernels::Tensor> wrong = {views[0], ids.tensor()};
  EXPECT_THROW(cpu.sums_of_squares(wrong), core::Error);
}

TEST(GradClip, RejectsNonPositiveMaxNorm) {
  std::vector<float> a = {1.0f};
  std::vector<kernels::Tensor> views = {testing::host_tensor(a)};
  EXPECT_THROW(clip_grad_norm(testing::cpu(), views, 0.0), core::Error);
}

}  // namespace
}  // namespace tandem::optim
