#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

struct AttentionShape {
  i64 B, T, Hq, Hkv, D, window;
  std::vector<std::int64_t> doc_start = {};  // [B * T], empty = one document per row
  i64 doc(i64 b, i64 i) const { return doc_start.empty() ? 0 : doc_start[b * T + i]; }
  const std::int64_t* docs() const { return doc_start.empty() ? nullptr : doc_start.data(); }
};

// doc_start for rows whose documents begin at the given positions (0 implied), the same per row.
std::vector<std::int64_t> starts_at(i64 B, i64 T, std::vector<i64> begins) {
  std::vector<std::int64_t> out;
  for (i64 b = 0; b < B; ++b) {
    i64 cur = 0;
    for (i64 t = 0; t < T; ++t) {
      for (i64 x : begins)
        if (x == t) cur = t;
      out.push_back(cur);
    }
  }
  return out;
}

// Straightforward double attention: full score rows, masked, softmax, weighted sum.
// Returns out and, if lse_out is given, the log-sum-exp of each (b, h, i) row.
std::vector<double> attention_ref(const AttentionShape& s, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  double scale, std::vector<double>* lse_out = nullptr) {
  std::vector<double> out(s.B * s.T * s.Hq * s.D, 0.0);
  if (lse_out) lse_out->assign(s.B * s.Hq * s.T, 0.0);
  std::vector<double> p(s.T);
  const i64 group = s.Hq / s.Hkv;
  for (i64 b = 0; b < s.B; ++b)
    for (i64 h = 0; h < s.Hq; ++h)
      for (i64 i = 0; i < s.T; ++i) {
        const i64 kvh = h / group;
        double mx = -INFINITY;
        for (i64 j = 0; j < s.T; ++j) {
          const bool vis = j <= i && (s.window <= 0 || i - s.window < j) && j >= s.doc(b, i);
          if (!vis) {
            p[j] = -INFINITY;
            continue;
          }
          double dot = 0.0;
          for (i64 c = 0; c < s.D; ++c)
            dot += q[((b * s.T + i) * s.Hq + h) * s.D + c] *
                   k[((b * s.T + j) * s.Hkv + kvh) * s.D + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (i64 j = 0; j < s.T; ++j) {
          p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
          sum += p[j];
        }
        for (i64 j = 0; j < s.T; ++j) {
          if (p[j] == 0.0) continue;
          for (i64 c = 0; c < s.D; ++c)
            out[((b * s.T + i) * s.Hq + h) * s.D + c] +=
                p[j] / sum * v[((b * s.T + j) * s.Hkv + kvh) * s.D + c];
        }
        if (lse_out) (*lse_out)[(b * s.Hq + h) * s.T + i] = mx + std::log(sum);
      }
  return out;
}

struct AttentionRun {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
};

AttentionRun run_kernels(const AttentionShape& s, float scale, std::uint64_t seed) {
  AttentionRun r;
  r.q = random_floats(s.B * s.T * s.Hq * s.D, seed);
  r.k = random_floats(s.B * s.T * s.Hkv * s.D, seed + 1);
  r.v = random_floats(s.B * s.T * s.Hkv * s.D, seed + 2);
  r.dout = random_floats(r.q.size(), seed + 3);
  r.out.assign(r.q.size(), NAN);
  r.lse.assign(s.B * s.Hq * s.T, NAN);
  attention_forward(r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(), s.B, s.T, s.Hq,
                    s.Hkv, s.D, s.window, scale, s.docs());
  r.dq.assign(r.q.size(), NAN);  // overwritten: NaN would leak through if not
  r.dk.assign(r.k.size(), NAN);
  r.dv.assign(r.v.size(), NAN);
  attention_backward(r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(), r.dout.data(),
                     r.dq.data(), r.dk.data(), r.dv.data(), s.B, s.T, s.Hq, s.Hkv, s.D, s.window,
                     scale, s.docs());
  return r;
}

// Checks forward (out, lse) against the double reference, and dq/dk/dv against central finite
// differences of <dout, attention_ref(...)> (all coordinates, or `samples` random ones per tensor).
void check(const AttentionShape& s, std::size_t samples = 0) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  AttentionRun r = run_kernels(s, scale, 100 + s.T + s.window);
  const auto qd = to_double(r.q), kd = to_double(r.k), vd = to_double(r.v);
  const auto dod = to_double(r.dout);
  std::vector<double> lse_ref;
  auto out_ref = attention_ref(s, qd, kd, vd, scale, &lse_ref);
  EXPECT_LT(max_scaled_error(r.out, out_ref), kForwardTolerance);
  EXPECT_LT(max_scaled_error(r.lse, lse_ref, 1.0), kForwardTolerance);

  auto coords = [&](std::size_t n, std::uint64_t seed) {
    return samples ? sample_coords(n, samples, seed) : std::vector<std::size_t>{};
  };
  auto num_dq =
      numeric_gradient([&](const auto& x) { return dot(attention_ref(s, x, kd, vd, scale), dod); },
                       qd, coords(qd.size(), 1));
  auto num_dk =
      numeric_gradient([&](const auto& x) { return dot(attention_ref(s, qd, x, vd, scale), dod); },
                       kd, coords(kd.size(), 2));
  auto num_dv =
      numeric_gradient([&](const auto& x) { return dot(attention_ref(s, qd, kd, x, scale), dod); },
                       vd, coords(vd.size(), 3));
  // Floor 1 (dout is O(1)): with window 1 the output is v itself and dq, dk are exactly zero, so
  // there the bound is absolute.
  EXPECT_LT(max_scaled_gradient_error(r.dq, num_dq, 1.0), kGradTolerance);
  EXPECT_LT(max_scaled_gradient_error(r.dk, num_dk, 1.0), kGradTolerance);
  EXPECT_LT(max_scaled_gradient_error(r.dv, num_dv, 1.0), kGradTolerance);
}

class AttentionSmall : public ::testing::TestWithParam<i64> {};

// T=7, GQA 3 query heads on 1 kv head, head_dim 5, batch 2; windows: full, 1 (only itself),
// smaller than T, equal to T, larger than T.
TEST_P(AttentionSmall, ForwardAndFiniteDifferenceBackward) {
  check(AttentionShape{2, 7, 3, 1, 5, GetParam()});
}
INSTANTIATE_TEST_SUITE_P(Windows, AttentionSmall, ::testing::Values(0, 1, 3, 7, 10),
                         ::testing::PrintToStringParamName());

TEST(Attention, WindowOneIsIdentityOnValues) {
  const AttentionShape s{1, 5, 2, 2, 3, 1};
  AttentionRun r = run_kernels(s, 0.5f, 7);
  for (i64 t = 0; t < s.T; ++t)
    for (i64 h = 0; h < s.Hq; ++h)
      for (i64 c = 0; c < s.D; ++c)
        EXPECT_FLOAT_EQ(r.out[(t * s.Hq + h) * s.D + c], r.v[(t * s.Hkv + h) * s.D + c]);
}

// Several query tiles (128) and key tiles (64), a window that does not align with tiles, GQA 4/2,
// full causal too; gradients checked on sampled coordinates to keep the test fast.
TEST(Attention, MultiTileMatchesReference) {
  check(AttentionShape{1, 150, 4, 2, 8, 70}, 40);
  check(AttentionShape{2, 131, 2, 1, 6, 0}, 40);
  check(AttentionShape{1, 129, 2, 2, 4, 64}, 40);
}

// Intra-document masking (OLMo-core's doc_lens): keys only from the query's own document, with
// and without a window; the second row has different documents than the first.
TEST(Attention, DocumentsForwardAndFiniteDifferenceBackward) {
  for (i64 window : {0, 3}) {
    AttentionShape s{2, 9, 2, 1, 4, window};
    s.doc_start = {0, 0, 0, 3, 3, 3, 3, 7, 7,   // documents [0, 3), [3, 7), [7, 9)
                   0, 1, 1, 1, 1, 1, 1, 1, 8};  // [0, 1), [1, 8), [8, 9)
    check(s);
  }
}

// Document boundaries that fall inside and on the edges of query (128) and key (64) tiles.
TEST(Attention, DocumentsAcrossTilesMatchReference) {
  check(AttentionShape{1, 150, 2, 1, 8, 70, starts_at(1, 150, {50, 64, 129, 140})}, 40);
  check(AttentionShape{2, 140, 2, 2, 4, 0, starts_at(2, 140, {1, 63, 128})}, 40);
}

// A masked row sees exactly what its document alone would see.
TEST(Attention, DocumentsEqualEachDocumentAlone) {
  const i64 T = 20, D = 4;
  AttentionShape packed{1, T, 1, 1, D, 5, starts_at(1, T, {6, 13})};
  AttentionRun all = run_kernels(packed, 0.5f, 9);
  for (auto [begin, end] : {std::pair<i64, i64>{0, 6}, {6, 13}, {13, 20}}) {
    const i64 n = end - begin;
    std::vector<float> out(n * D), lse(n);
    attention_forward(all.q.data() + begin * D, all.k.data() + begin * D, all.v.data() + begin * D,
                      out.data(), lse.data(), 1, n, 1, 1, D, 5, 0.5f);
    for (i64 i = 0; i < n * D; ++i) EXPECT_NEAR(out[i], all.out[begin * D + i], 1e-6) << begin;
  }
}

TEST(Attention, BadDocumentStartsAreErrors) {
  std::vector<float> x(4 * 2), lse(4);
  std::vector<std::int64_t> later = {0, 2, 2, 2};       // token 1's document starts after it
  std::vector<std::int64_t> decreasing = {0, 1, 0, 0};  // starts go back
  for (const auto* docs : {&later, &decreasing})
    EXPECT_THROW(attention_forward(x.data(), x.data(), x.data(), x.data(), lse.data(), 1, 4, 1, 1,
                                   2, 0, 1.0f, docs->data()),
                 tandem::core::Error);
}

TEST(Attention, BadHeadCountsAreErrors) {
  std::vector<float> x(64), lse(16);
  EXPECT_THROW(
      attention_forward(x.data(), x.data(), x.data(), x.data(), lse.data(), 1, 2, 3, 2, 2, 0, 1.0f),
      tandem::core::Error);
}

// Sliding window at long T (T = 4096, window 64): the tiled kernel's results are right far from the
// start of the sequence too; spot-check a few rows. (Its speed is measured in bench/kernels.cc.)
TEST(Attention, LongSequenceWithSmallWindow) {
  const AttentionShape s{1, 4096, 2, 1, 16, 64};
  const float scale = 0.25f;
  AttentionRun r = run_kernels(s, scale, 42);
  for (i64 i : {0, 63, 64, 2000, 4095}) {
    for (i64 h = 0; h < s.Hq; ++h) {
      // Reference row over the visible keys only.
      double mx = -INFINITY;
      std::vector<double> sc;
      const i64 lo = std::max<i64>(0, i - s.window + 1);
      for (i64 j = lo; j <= i; ++j) {
        double d = 0.0;
        for (i64 c = 0; c < s.D; ++c) d += double(r.q[(i * s.Hq + h) * s.D + c]) * r.k[j * s.D + c];
        sc.push_back(d * scale);
        mx = std::max(mx, sc.back());
      }
      double sum = 0.0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (i64 c = 0; c < s.D; ++c) {
        double o = 0.0;
        for (i64 j = lo; j <= i; ++j) o += sc[j - lo] / sum * r.v[j * s.D + c];
        EXPECT_NEAR(r.out[(i * s.Hq + h) * s.D + c], o, 1e-5);
      }
      EXPECT_NEAR(r.lse[h * s.T + i], mx + std::log(sum), 1e-5);
    }
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
