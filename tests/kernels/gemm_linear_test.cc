#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

TEST(Gemm, AllTransposeCombinationsWithPaddedLeadingDims) {
  const i64 M = 7, N = 11, K = 13;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K]; leading dims padded by 3.
      const i64 a_rows = ta ? K : M, a_cols = ta ? M : K;
      const i64 b_rows = tb ? N : K, b_cols = tb ? K : N;
      const i64 lda = a_cols + 3, ldb = b_cols + 3, ldc = N + 3;
      auto A = random_floats(a_rows * lda, 1);
      auto B = random_floats(b_rows * ldb, 2);
      auto C = random_floats(M * ldc, 3);
      const float alpha = 0.75f, beta = -0.5f;
      std::vector<double> ref(C.begin(), C.end());
      for (i64 i = 0; i < M; ++i) {
        for (i64 j = 0; j < N; ++j) {
          double s = 0.0;
          for (i64 p = 0; p < K; ++p) {
            const double a = ta ? A[p * lda + i] : A[i * lda + p];
            const double b = tb ? B[j * ldb + p] : B[p * ldb + j];
            s += a * b;
          }
          ref[i * ldc + j] = alpha * s + beta * static_cast<double>(C[i * ldc + j]);
        }
      }
      gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
      EXPECT_LT(max_scaled_error(C, ref), kForwardTolerance)
          << "trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST(Gemm, BadLeadingDimensionIsAnError) {
  std::vector<float> A(4), B(4), C(4);
  // lda < K for a non-transposed row-major A is invalid for oneDNN.
  EXPECT_THROW(gemm(false, false, 2, 2, 2, 1.0f, A.data(), 1, B.data(), 2, 0.0f, C.data(), 2),
               tandem::core::Error);
}

// An empty inner dimension: C = beta * C, and beta = 0 writes zeros without reading C (a NaN there
// does not survive). Found by the CUDA tests run on the emulator: oneDNN refused lda = 0.
TEST(Gemm, EmptyInnerDimensionScalesC) {
  const i64 M = 3, N = 4, ldc = 5;
  std::vector<float> C = random_floats(M * ldc, 4);
  const std::vector<float> before = C;
  gemm(false, false, M, N, 0, 1.0f, nullptr, 0, nullptr, N, 0.5f, C.data(), ldc);
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < ldc; ++j)
      EXPECT_EQ(C[i * ldc + j], j < N ? 0.5f * before[i * ldc + j] : before[i * ldc + j]);
  std::fill(C.begin(), C.end(), std::nanf(""));
  gemm(true, true, M, N, 0, 1.0f, nullptr, 0, nullptr, 0, 0.0f, C.data(), ldc);
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < N; ++j) EXPECT_EQ(C[i * ldc + j], 0.0f);
}

struct LinearRef {
  i64 T, in, out;
  std::vector<double> y(const std::vector<double>& x, const std::vector<double>& w) const {
    std::vector<double> r(T * out, 0.0);
    for (i64 t = 0; t < T; ++t)
      for (i64 o = 0; o < out; ++o)
        for (i64 i = 0; i < in; ++i) r[t * out + o] += x[t * in + i] * w[o * in + i];
    return r;
  }
};

TEST(Linear, ForwardAndBackwardMatchDoubleReferenceAndFiniteDifferences) {
  const i64 T = 7, in = 13, out = 5;
  LinearRef ref{T, in, out};
  auto x = random_floats(T * in, 10);
  auto w = random_floats(out * in, 11);
  auto dy = random_floats(T * out, 12);
  std::vector<float> y(T * out);
  linear_forward(x.data(), w.data(), y.data(), T, in, out);
  EXPECT_LT(max_scaled_error(y, ref.y(to_double(x), to_double(w))), kForwardTolerance);

  const auto dyd = to_double(dy);
  const auto xd = to_double(x), wd = to_double(w);
  auto num_dx = numeric_gradient([&](const auto& xv) { return dot(ref.y(xv, wd), dyd); }, xd);
  auto num_dw = numeric_gradient([&](const auto& wv) { return dot(ref.y(xd, wv), dyd); }, wd);

  std::vector<float> dx(T * in, 123.0f), dw(out * in, 0.0f);
  linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), T, in, out, false);
  EXPECT_LT(max_scaled_gradient_error(dx, num_dx), kGradTolerance);
  EXPECT_LT(max_scaled_gradient_error(dw, num_dw), kGradTolerance);

  // Accumulation: dw always accumulates; dx accumulates on request; null skips.
  std::vector<float> dx2 = dx, dw2 = dw;
  linear_backward(x.data(), w.data(), dy.data(), dx2.data(), dw2.data(), T, in, out, true);
  for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], 2 * dx[i], 1e-5);
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw2[i], 2 * dw[i], 1e-5);
  std::vector<float> dw3 = dw;
  linear_backward(x.data(), w.data(), dy.data(), nullptr, dw3.data(), T, in, out, false);
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw3[i], 2 * dw[i], 1e-5);
  std::vector<float> dx4(T * in);
  linear_backward(x.data(), w.data(), dy.data(), dx4.data(), nullptr, T, in, out, false);
  EXPECT_EQ(dx4, dx);
}

TEST(Add, SumsAndMayAlias) {
  auto a = random_floats(37, 1), b = random_floats(37, 2);
  std::vector<float> y(37);
  add(a.data(), b.data(), y.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  auto a2 = a;
  add(a2.data(), b.data(), a2.data(), 37);
  EXPECT_EQ(a2, y);
}

}  // namespace
}  // namespace tandem::kernels::cpu
