// The CUDA backend is deterministic: every op with a reduction, run twice on the same inputs on
// the same GPU, gives the same bits (no float atomics, fixed reduction orders, cached cuBLASLt
// algorithms without split-K).
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace tandem::cuda_testing {
namespace {

std::vector<float> run_all(Backend& gpu) {
  std::vector<float> all;
  auto append = [&](const Buffer& b) {
    const std::vector<float> v = get(gpu, b);
    all.insert(all.end(), v.begin(), v.end());
  };
  const std::int64_t B = 2, T = 200, Hq = 4, Hkv = 2, D = 64, d = 128, V = 3001;
  const Shape qs{B, T, Hq, D}, ks{B, T, Hkv, D};
  Buffer q = put(gpu, qs, normal(qs.numel(), 1)), k = put(gpu, ks, normal(ks.numel(), 2));
  Buffer v = put(gpu, ks, normal(ks.numel(), 3)), dout = put(gpu, qs, normal(qs.numel(), 4));
  std::vector<std::int64_t> starts(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) starts[i] = (i % T) >= 120 ? 120 : 0;
  Buffer docs = put_i64(gpu, Shape{B * T}, starts);
  for (std::int64_t window : {0, 50}) {
    for (bool with_docs : {false, true}) {
      Buffer out = gpu.allocate(DType::f32, qs), lse = gpu.allocate(DType::f32, Shape{B, Hq, T});
      Buffer dq = gpu.allocate(DType::f32, qs), dk = gpu.allocate(DType::f32, ks),
             dv = gpu.allocate(DType::f32, ks);
      const Tensor doc = with_docs ? docs.tensor() : Tensor();
      gpu.attention_forward(q, k, v, out, lse, window, 0.125f, doc);
      gpu.attention_backward(q, k, v, out, lse, dout, dq, dk, dv, window, 0.125f, doc);
      append(out), append(lse), append(dq), append(dk), append(dv);
    }
  }
  const std::int64_t N = B * T;
  Buffer x = put(gpu, Shape{N, d}, normal(N * d, 5)), w = put(gpu, Shape{d}, normal(d, 6));
  Buffer dy = put(gpu, Shape{N, d}, normal(N * d, 7));
  Buffer y = gpu.allocate(DType::f32, Shape{N, d}), rstd = gpu.allocate(DType::f32, Shape{N});
  Buffer dx = gpu.allocate(DType::f32, Shape{N, d}), dw = put(gpu, Shape{d}, normal(d, 8));
  gpu.rmsnorm_forward(x, w, y, rstd, 1e-6f);
  gpu.rmsnorm_backward(x, w, rstd, dy, dx, dw);
  append(y), append(rstd), append(dx), append(dw);

  std::vector<std::int64_t> ids(N), labels(N);
  for (std::int64_t n = 0; n < N; ++n)
    ids[n] = (n * 7919) % V, labels[n] = n % 5 ? (n * 31) % V : -100;
  Buffer id = put_i64(gpu, Shape{N}, ids), label = put_i64(gpu, Shape{N}, labels);
  Buffer dtable = put(gpu, Shape{V, d}, normal(V * d, 9));
  gpu.embedding_backward(id, dy, dtable);
  append(dtable);

  Buffer lm = put(gpu, Shape{V, d}, normal(V * d, 10, 0.1f));
  Buffer dh = gpu.allocate(DType::f32, Shape{N, d}), dlm = put(gpu, Shape{V, d}, normal(V * d, 11));
  const kernels::LossSums r = gpu.lm_head_cross_entropy(x, lm, label, 1e-4f, 1.0f / N, dh, dlm);
  append(dh), append(dlm);
  all.push_back(static_cast<float>(r.ce_sum));
  all.push_back(static_cast<float>(r.z_sum));

  Buffer wl = put(gpu, Shape{96, d}, normal(96 * d, 12)),
         yl = gpu.allocate(DType::f32, Shape{N, 96});
  Buffer dxl = gpu.allocate(DType::f32, Shape{N, d}),
         dwl = put(gpu, Shape{96, d}, normal(96 * d, 13));
  gpu.linear_forward(x, wl, yl);
  gpu.linear_backward(x, wl, yl, dxl, dwl, false);
  append(yl), append(dxl), append(dwl);
  all.push_back(static_cast<float>(gpu.sum_of_squares(dlm)));
  return all;
}

TEST(CudaDeterminism, TwoRunsAreBitIdentical) {
  REQUIRE_CUDA(gpu);
  const std::vector<float> a = run_all(gpu);
  const std::vector<float> b = run_all(gpu);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(bit_identical(a, b));
}

}  // namespace
}  // namespace tandem::cuda_testing
