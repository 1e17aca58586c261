// Same inputs, same thread count: bit-identical results, for every kernel with a reduction.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "kernel_test_util.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

// Runs every op once and returns all outputs concatenated.
std::vector<float> run_all() {
  std::vector<float> all;
  auto append = [&](const std::vector<float>& v) { all.insert(all.end(), v.begin(), v.end()); };
  const i64 B = 2, T = 200, Hq = 4, Hkv = 2, D = 16, d = 64, V = 301;
  auto q = random_floats(B * T * Hq * D, 1), k = random_floats(B * T * Hkv * D, 2),
       v = random_floats(B * T * Hkv * D, 3), dout = random_floats(B * T * Hq * D, 4);
  for (i64 window : {0, 50}) {
    std::vector<float> out(q.size()), lse(B * Hq * T), dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hkv, D,
                      window, 0.25f);
    attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                       dk.data(), dv.data(), B, T, Hq, Hkv, D, window, 0.25f);
    append(out), append(lse), append(dq), append(dk), append(dv);
  }
  const i64 N = B * T;
  auto x = random_floats(N * d, 5), w = random_floats(d, 6), dy = random_floats(N * d, 7);
  std::vector<float> y(N * d), rstd(N), dx(N * d), dw(d, 0.0f);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, d, 1e-6f);
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), N, d);
  append(y), append(rstd), append(dx), append(dw);

  std::vector<std::int64_t> ids(N), labels(N);
  for (i64 n = 0; n < N; ++n) ids[n] = (n * 7919) % V, labels[n] = n % 5 ? (n * 31) % V : -100;
  std::vector<float> dtable(V * d, 0.0f);
  embedding_backward(ids.data(), dy.data(), dtable.data(), N, d, V);
  append(dtable);

  auto lm = random_floats(V * d, 8, 0.1f);
  std::vector<float> dh(N * d), dlm(V * d, 0.0f);
  auto res = lm_head_cross_entropy(x.data(), lm.data(), labels.data(), N, d, V, 1e-4f, 1.0f / N,
                                   dh.data(), dlm.data());
  append(dh), append(dlm);
  all.push_back(static_cast<float>(res.ce_sum));
  all.push_back(static_cast<float>(res.z_sum));

  std::vector<float> lin(N * 48), wl = random_floats(48 * d, 9), dxl(N * d), dwl(48 * d, 0.0f);
  linear_forward(x.data(), wl.data(), lin.data(), N, d, 48);
  linear_backward(x.data(), wl.data(), lin.data(), dxl.data(), dwl.data(), N, d, 48, false);
  append(lin), append(dxl), append(dwl);

  std::vector<float> h(N * d), dg(N * d), du(N * d);
  swiglu_forward(x.data(), dy.data(), h.data(), N * d);
  swiglu_backward(x.data(), dy.data(), h.data(), dg.data(), du.data(), N * d);
  append(h), append(dg), append(du);
  return all;
}

TEST(Determinism, TwoRunsWithTwoThreadsAreBitIdentical) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const auto a = run_all();
  const auto b = run_all();
  omp_set_num_threads(saved);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace tandem::kernels::cpu
