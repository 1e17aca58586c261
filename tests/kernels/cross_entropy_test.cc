#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/kernels/cpu/cross_entropy_chunked.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

struct RefLoss {
  double ce = 0.0, z = 0.0;
  i64 count = 0;
};

RefLoss ce_ref(const std::vector<double>& hidden, const std::vector<double>& w,
               const std::vector<std::int64_t>& labels, i64 N, i64 d, i64 V) {
  RefLoss out;
  std::vector<double> logits(V);
  for (i64 n = 0; n < N; ++n) {
    if (labels[n] == core::kIgnoreIndex) continue;
    double mx = -INFINITY;
    for (i64 v = 0; v < V; ++v) {
      double s = 0.0;
      for (i64 c = 0; c < d; ++c) s += hidden[n * d + c] * w[v * d + c];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double sum = 0.0;
    for (i64 v = 0; v < V; ++v) sum += std::exp(logits[v] - mx);
    const double lse = mx + std::log(sum);
    out.ce += lse - logits[labels[n]];
    out.z += lse * lse;
    ++out.count;
  }
  return out;
}

struct Case {
  i64 N = 9, d = 13, V = 37;
  std::vector<std::int64_t> labels;
  std::vector<float> hidden, w;
};

Case make_case(i64 N, i64 d, i64 V, std::uint64_t seed) {
  Case c{N, d, V, {}, random_floats(N * d, seed), random_floats(V * d, seed + 1, 0.5f)};
  std::mt19937_64 gen(seed + 2);
  for (i64 n = 0; n < N; ++n) c.labels.push_back(static_cast<std::int64_t>(gen() % V));
  return c;
}

// Forward against the double reference, gradients against finite differences of
// grad_scale * (ce + z_weight * z), with ignored labels including a whole ignored chunk.
TEST(CrossEntropy, ForwardAndFiniteDifferenceBackward) {
  Case c = make_case(9, 13, 37, 1);
  c.labels[0] = core::kIgnoreIndex;
  c.labels[3] = core::kIgnoreIndex;  // with chunk_rows 2, rows 2-3 are one chunk... and 4-5:
  c.labels[4] = core::kIgnoreIndex;
  c.labels[5] = core::kIgnoreIndex;  // chunk [4,5] is entirely ignored
  c.labels[8] = 36;                  // last vocab entry
  const float z_weight = 0.01f, grad_scale = 0.37f;
  const auto hd = to_double(c.hidden), wd = to_double(c.w);
  RefLoss ref = ce_ref(hd, wd, c.labels, c.N, c.d, c.V);
  auto loss = [&](const std::vector<double>& h, const std::vector<double>& w) {
    RefLoss l = ce_ref(h, w, c.labels, c.N, c.d, c.V);
    return grad_scale * (l.ce + z_weight * l.z);
  };
  auto num_dh = numeric_gradient([&](const auto& h) { return loss(h, wd); }, hd);
  auto num_dw = numeric_gradient([&](const auto& w) { return loss(hd, w); }, wd);
  for (i64 chunk : {i64{1}, i64{2}, i64{4}, i64{9}, i64{1000}}) {
    std::vector<float> dh(c.N * c.d, NAN), dw(c.V * c.d, 0.0f);
    auto res =
        lm_head_cross_entropy_chunked(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V,
                                      z_weight, grad_scale, dh.data(), dw.data(), chunk);
    EXPECT_EQ(res.count, ref.count);
    EXPECT_NEAR(res.ce_sum, ref.ce, 1e-5 * std::abs(ref.ce)) << chunk;
    EXPECT_NEAR(res.z_sum, ref.z, 1e-5 * std::abs(ref.z)) << chunk;
    EXPECT_LT(max_scaled_gradient_error(dh, num_dh), kGradTolerance) << chunk;
    EXPECT_LT(max_scaled_gradient_error(dw, num_dw), kGradTolerance) << chunk;
    for (i64 n : {0, 3, 4, 5}) {  // ignored rows get exactly zero gradient
      for (i64 k = 0; k < c.d; ++k) EXPECT_EQ(dh[n * c.d + k], 0.0f);
    }
  }
}

TEST(CrossEntropy, PublicEntryPointMatchesReferenceAndAccumulatesDw) {
  Case c = make_case(5, 7, 41, 2);
  c.labels[2] = core::kIgnoreIndex;
  RefLoss ref = ce_ref(to_double(c.hidden), to_double(c.w), c.labels, c.N, c.d, c.V);
  std::vector<float> dh(c.N * c.d), dw(c.V * c.d, 0.0f);
  auto res = lm_head_cross_entropy(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V,
                                   1e-4f, 1.0f, dh.data(), dw.data());
  EXPECT_EQ(res.count, 4);
  EXPECT_NEAR(res.ce_sum, ref.ce, 1e-5 * ref.ce);
  auto dw_once = dw;
  lm_head_cross_entropy(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V, 1e-4f, 1.0f,
                        dh.data(), dw.data());
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw_once[i], 1e-6);
  // Forward only: no gradient pointers, same sums.
  auto fwd = lm_head_cross_entropy(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V,
                                   1e-4f, 1.0f, nullptr, nullptr);
  EXPECT_EQ(fwd.ce_sum, res.ce_sum);
  EXPECT_EQ(fwd.z_sum, res.z_sum);
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndZeroGradient) {
  Case c = make_case(6, 5, 37, 3);
  for (auto& l : c.labels) l = core::kIgnoreIndex;
  std::vector<float> dh(c.N * c.d, NAN), dw(c.V * c.d, 1.5f);
  auto res = lm_head_cross_entropy(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V,
                                   1e-4f, 1.0f, dh.data(), dw.data());
  EXPECT_EQ(res.count, 0);
  EXPECT_EQ(res.ce_sum, 0.0);
  EXPECT_EQ(res.z_sum, 0.0);
  for (float x : dh) EXPECT_EQ(x, 0.0f);
  for (float x : dw) EXPECT_EQ(x, 1.5f);
}

// Many tokens over several chunks at a realistic vocabulary width: chunked == one chunk.
TEST(CrossEntropy, ChunkedEqualsUnchunkedOverManyChunks) {
  Case c = make_case(200, 32, 1003, 4);
  for (i64 n = 0; n < c.N; n += 7) c.labels[n] = core::kIgnoreIndex;
  std::vector<float> dh_a(c.N * c.d), dw_a(c.V * c.d, 0.0f), dh_b(c.N * c.d), dw_b(c.V * c.d, 0.0f);
  auto a = lm_head_cross_entropy_chunked(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d,
                                         c.V, 1e-4f, 0.01f, dh_a.data(), dw_a.data(), c.N);
  auto b = lm_head_cross_entropy_chunked(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d,
                                         c.V, 1e-4f, 0.01f, dh_b.data(), dw_b.data(), 23);
  EXPECT_EQ(a.count, b.count);
  // Only the gemm blocking differs between the two: agreement to fp32 rounding.
  EXPECT_NEAR(a.ce_sum, b.ce_sum, 1e-6 * a.ce_sum);
  EXPECT_NEAR(a.z_sum, b.z_sum, 1e-6 * a.z_sum);
  EXPECT_LT(max_scaled_error(dh_b, to_double(dh_a)), 1e-5);
  EXPECT_LT(max_scaled_error(dw_b, to_double(dw_a)), 1e-5);
  // And the sums match the double reference.
  RefLoss ref = ce_ref(to_double(c.hidden), to_double(c.w), c.labels, c.N, c.d, c.V);
  EXPECT_NEAR(b.ce_sum, ref.ce, 1e-5 * ref.ce);
  EXPECT_NEAR(b.z_sum, ref.z, 1e-5 * ref.z);
}

TEST(CrossEntropy, ChunkSizeKeepsLogitsUnder32MB) {
  EXPECT_LE(lm_head_chunk_rows(100352) * 100352 * 4, 32 << 20);
  EXPECT_GE(lm_head_chunk_rows(100352), 64);
}

TEST(CrossEntropy, BadLabelIsAnErrorNamingLabelAndPosition) {
  Case c = make_case(4, 3, 10, 5);
  c.labels[2] = 10;
  try {
    lm_head_cross_entropy(c.hidden.data(), c.w.data(), c.labels.data(), c.N, c.d, c.V, 0.0f, 1.0f,
                          nullptr, nullptr);
    FAIL();
  } catch (const tandem::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 at position 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
