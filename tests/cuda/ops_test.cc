// Every op of the CUDA backend against the CPU backend's op on the same random inputs (fp32),
// within the bounds of cuda_test_util.h; ops whose arithmetic is written to be the CPU's exactly
// (embedding backward, sum of squares, AdamW) must match bit for bit. Without a GPU every test
// skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <random>
#include <sstream>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cuda/launch.h"

namespace tandem::cuda_testing {
namespace {

// The same values on both backends.
struct Both {
  Buffer c, g;
};
Both both(Backend& gpu, Shape shape, const std::vector<float>& values) {
  return {put(testing::cpu_backend(), shape, values), put(gpu, shape, values)};
}
Both both_i64(Backend& gpu, Shape shape, const std::vector<std::int64_t>& values) {
  return {put_i64(testing::cpu_backend(), shape, values), put_i64(gpu, shape, values)};
}
Both zeros(Backend& gpu, Shape shape) {
  return both(gpu, shape, std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.0f));
}
// rel-L2 of the GPU result against the CPU result.
double diff(Backend& gpu, const Both& x) {
  return rel_l2(get(gpu, x.g), get(testing::cpu_backend(), x.c));
}

TEST(CudaOps, GemmAllTransposesMatchCpu) {
  REQUIRE_CUDA(gpu);
  const std::int64_t M = 37, N = 53, K = 129;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
      Both a = both(gpu, sa, normal(M * K, 1)), b = both(gpu, sb, normal(K * N, 2));
      Both c = both(gpu, Shape{M, N}, normal(M * N, 3));
      testing::cpu_backend().gemm(ta, tb, 0.75f, a.c, b.c, 0.5f, c.c);
      gpu.gemm(ta, tb, 0.75f, a.g, b.g, 0.5f, c.g);
      EXPECT_LE(diff(gpu, c), reduction_bound(K)) << "trans_a " << ta << " trans_b " << tb;
    }
  }
  // K = 0: C = beta * C.
  Both a = both(gpu, Shape{M, 0}, {}), b = both(gpu, Shape{0, N}, {});
  Both c = both(gpu, Shape{M, N}, normal(M * N, 4));
  testing::cpu_backend().gemm(false, false, 1.0f, a.c, b.c, 0.5f, c.c);
  gpu.gemm(false, false, 1.0f, a.g, b.g, 0.5f, c.g);
  EXPECT_TRUE(bit_identical(get(gpu, c.g), get(testing::cpu_backend(), c.c)));
}

TEST(CudaOps, LinearForwardAndBackwardMatchCpu) {
  REQUIRE_CUDA(gpu);
  const std::int64_t T = 45, in = 96, out = 80;
  Both x = both(gpu, Shape{T, in}, normal(T * in, 5)),
       w = both(gpu, Shape{out, in}, normal(out * in, 6));
  Both y = zeros(gpu, Shape{T, out});
  testing::cpu_backend().linear_forward(x.c, w.c, y.c);
  gpu.linear_forward(x.g, w.g, y.g);
  EXPECT_LE(diff(gpu, y), reduction_bound(in));
  for (bool accumulate : {false, true}) {
    Both dy = both(gpu, Shape{T, out}, normal(T * out, 7));
    Both dx = both(gpu, Shape{T, in}, normal(T * in, 8));
    Both dw = both(gpu, Shape{out, in}, normal(out * in, 9));
    testing::cpu_backend().linear_backward(x.c, w.c, dy.c, dx.c, dw.c, accumulate);
    gpu.linear_backward(x.g, w.g, dy.g, dx.g, dw.g, accumulate);
    EXPECT_LE(diff(gpu, dx), reduction_bound(out + 1)) << "accumulate " << accumulate;
    EXPECT_LE(diff(gpu, dw), reduction_bound(T + 1));
  }
}

TEST(CudaOps, EmbeddingMatchesCpuBitForBit) {
  REQUIRE_CUDA(gpu);
  const std::int64_t V = 50, d = 300, T = 400;  // d spans two column blocks
  std::vector<std::int64_t> ids(T);
  for (std::int64_t t = 0; t < T; ++t) ids[t] = (t * 7919 + t / 3) % V;  // many repeats
  Both id = both_i64(gpu, Shape{T}, ids);
  Both table = both(gpu, Shape{V, d}, normal(V * d, 10));
  Both out = zeros(gpu, Shape{T, d});
  testing::cpu_backend().embedding_forward(id.c, table.c, out.c);
  gpu.embedding_forward(id.g, table.g, out.g);
  EXPECT_TRUE(bit_identical(get(gpu, out.g), get(testing::cpu_backend(), out.c)));
  Both dout = both(gpu, Shape{T, d}, normal(T * d, 11));
  Both dtable = both(gpu, Shape{V, d}, normal(V * d, 12));
  testing::cpu_backend().embedding_backward(id.c, dout.c, dtable.c);
  gpu.embedding_backward(id.g, dout.g, dtable.g);
  EXPECT_TRUE(bit_identical(get(gpu, dtable.g), get(testing::cpu_backend(), dtable.c)))
      << "rel L2 " << diff(gpu, dtable);

  ids[17] = V;  // out of range: an error naming the id, as on the CPU
  Buffer bad = put_i64(gpu, Shape{T}, ids);
  EXPECT_THROW(gpu.embedding_forward(bad, table.g, out.g), core::Error);
}

// The embedding backward on both backends from the same dout and table (drawn from `seed`):
// the GPU's table gradient must be the CPU's bit for bit.
void expect_embedding_backward_matches_cpu(Backend& gpu, const std::vector<std::int64_t>& ids,
                                           std::int64_t V, std::int64_t d, std::uint64_t seed) {
  const auto T = static_cast<std::int64_t>(ids.size());
  Both id = both_i64(gpu, Shape{T}, ids);
  Both dout = both(gpu, Shape{T, d}, normal(T * d, seed));
  Both dtable = both(gpu, Shape{V, d}, normal(V * d, seed + 1, 0.01f));
  testing::cpu_backend().embedding_backward(id.c, dout.c, dtable.c);
  gpu.embedding_backward(id.g, dout.g, dtable.g);
  EXPECT_TRUE(bit_identical(get(gpu, dtable.g), get(testing::cpu_backend(), dtable.c)))
      << "rel L2 " << diff(gpu, dtable);
}

// The backward's device sort over OLMo's vocabulary (17 bits: three radix passes) and several
// tiles of 256 tokens: ids that agree in their low bytes and differ above, each id repeated
// tens of times, so that a wrong order within an id's tokens changes the bits of its sum.
TEST(CudaOps, EmbeddingBackwardSortsAnOlmoVocabularyInTokenOrder) {
  REQUIRE_CUDA(gpu);
  const std::int64_t V = 100352, d = 40;
  const std::vector<std::int64_t> favourites = {
      0, 5, 5 + 256, 5 + 65536, 5 + 65792, 70000, 100351, 256, 65536 + 255, 99999, 1 << 16, 300};
  std::mt19937_64 rng(21);
  std::vector<std::int64_t> ids(1000);
  for (auto& id : ids)
    id = rng() % 4 ? favourites[rng() % favourites.size()] : static_cast<std::int64_t>(rng() % V);
  expect_embedding_backward_matches_cpu(gpu, ids, V, d, 31);
}

// Runs of one id longer than the backward's shared-memory tile of 256 token indices: one of
// exactly two tiles (the next tile holds none of it), one of 300, one of 256 ending the sorted
// order, shuffled among a few singletons, over a width whose second column chunk is partial.
TEST(CudaOps, EmbeddingBackwardAddsLongRunsInTokenOrder) {
  REQUIRE_CUDA(gpu);
  const std::int64_t V = 64, d = 300;
  std::vector<std::int64_t> ids;
  for (auto [id, count] : {std::pair{3, 512}, {9, 300}, {63, 256}})
    ids.insert(ids.end(), count, id);
  for (std::int64_t id = 10; id < 42; ++id) ids.push_back(id);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(22));
  expect_embedding_backward_matches_cpu(gpu, ids, V, d, 51);
}

// A bad id in the backward (the forward refuses it first) adds nothing and is raised at the
// next synchronisation, naming the id; the other ids' rows are the CPU's over the good tokens.
TEST(CudaOps, EmbeddingBackwardRaisesABadIdAtTheNextSynchronisation) {
  REQUIRE_CUDA(gpu);
  const std::int64_t V = 600, d = 20, T = 600, bad_at = 417;
  std::vector<std::int64_t> ids(T);
  for (std::int64_t t = 0; t < T; ++t) ids[t] = (t * 31) % 7 + (t % 3) * 256;
  const std::vector<float> dout_values = normal(T * d, 41), table_values = normal(V * d, 42);
  std::vector<std::int64_t> good_ids;
  std::vector<float> good_dout;
  for (std::int64_t t = 0; t < T; ++t) {
    if (t == bad_at) continue;
    good_ids.push_back(ids[t]);
    good_dout.insert(good_dout.end(), dout_values.begin() + t * d,
                     dout_values.begin() + (t + 1) * d);
  }
  ids[bad_at] = V + 1000;
  Buffer id = put_i64(gpu, Shape{T}, ids), dout = put(gpu, Shape{T, d}, dout_values);
  Buffer dtable = put(gpu, Shape{V, d}, table_values);
  EXPECT_NO_THROW(gpu.embedding_backward(id, dout, dtable));
  try {
    gpu.synchronize();
    ADD_FAILURE() << "a bad id in the backward was never raised";
  } catch (const core::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("token id 1600 at position 417"), std::string::npos) << what;
  }
  Backend& cpu = testing::cpu_backend();
  const auto kept = static_cast<std::int64_t>(good_ids.size());
  Buffer cpu_ids = put_i64(cpu, Shape{kept}, good_ids);
  Buffer cpu_dout = put(cpu, Shape{kept, d}, good_dout);
  Buffer cpu_dtable = put(cpu, Shape{V, d}, table_values);
  cpu.embedding_backward(cpu_ids, cpu_dout, cpu_dtable);
  EXPECT_TRUE(bit_identical(get(gpu, dtable), get(cpu, cpu_dtable)));
}

TEST(CudaOps, RmsNormMatchesCpu) {
  REQUIRE_CUDA(gpu);
  for (std::int64_t d : {13, 512}) {  // a model width and an odd one
    const std::int64_t rows = 300;    // more rows than one dw chunk
    Both x = both(gpu, Shape{rows, d}, normal(rows * d, 13, 2.0f));
    Both w = both(gpu, Shape{d}, normal(d, 14));
    Both y = zeros(gpu, Shape{rows, d}), rstd = zeros(gpu, Shape{rows});
    testing::cpu_backend().rmsnorm_forward(x.c, w.c, y.c, rstd.c, 1e-6f);
    gpu.rmsnorm_forward(x.g, w.g, y.g, rstd.g, 1e-6f);
    EXPECT_LE(diff(gpu, y), kElementwise) << d;
    EXPECT_LE(diff(gpu, rstd), kElementwise) << d;
    Both dy = both(gpu, Shape{rows, d}, normal(rows * d, 15));
    Both dx = zeros(gpu, Shape{rows, d});
    Both dw = both(gpu, Shape{d}, normal(d, 16));
    testing::cpu_backend().rmsnorm_backward(x.c, w.c, rstd.c, dy.c, dx.c, dw.c);
    gpu.rmsnorm_backward(x.g, w.g, rstd.g, dy.g, dx.g, dw.g);
    EXPECT_LE(diff(gpu, dx), kElementwise) << d;  // sums in double on both sides
    EXPECT_LE(diff(gpu, dw), kElementwise) << d;
  }
}

// RoPE on the GPU against the CPU (with and without explicit positions), then a position outside
// the tables reported at the next synchronisation.
void expect_rope_matches_cpu(Backend& gpu, std::int64_t D) {
  const std::int64_t B = 2, T = 17, H = 3, P = 40;
  Both cos = both(gpu, Shape{P, D / 2}, normal(P * D / 2, 17));
  Both sin = both(gpu, Shape{P, D / 2}, normal(P * D / 2, 18));
  std::vector<std::int64_t> pos(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) pos[i] = (i * 13) % P;
  Both positions = both_i64(gpu, Shape{B * T}, pos);
  for (bool with_positions : {false, true}) {
    Both x = both(gpu, Shape{B, T, H, D}, normal(B * T * H * D, 19));
    const Tensor pc = with_positions ? positions.c.tensor() : Tensor();
    const Tensor pg = with_positions ? positions.g.tensor() : Tensor();
    testing::cpu_backend().rope_forward(x.c, cos.c, sin.c, pc);
    gpu.rope_forward(x.g, cos.g, sin.g, pg);
    EXPECT_LE(diff(gpu, x), kElementwise) << "forward, D " << D;
    testing::cpu_backend().rope_backward(x.c, cos.c, sin.c, pc);
    gpu.rope_backward(x.g, cos.g, sin.g, pg);
    EXPECT_LE(diff(gpu, x), kElementwise) << "backward, D " << D;
  }
  pos[5] = P;  // outside the tables: reported at the next synchronisation
  Buffer bad = put_i64(gpu, Shape{B * T}, pos);
  Buffer x = put(gpu, Shape{B, T, H, D}, normal(B * T * H * D, 20));
  EXPECT_THROW(
      {
        gpu.rope_forward(x, cos.g, sin.g, bad);
        gpu.synchronize();
      },
      core::Error)
      << "D " << D;
}

TEST(CudaOps, RopeMatchesCpuWithAndWithoutPositions) {
  REQUIRE_CUDA(gpu);
  // Head dims 10 (pairs one at a time) and 32 (8 pairs per 16-byte access).
  for (std::int64_t D : {10, 32}) expect_rope_matches_cpu(gpu, D);
}

struct AttentionCase {
  std::int64_t B, T, Hq, Hkv, D, window;
  std::vector<std::int64_t> doc_begins;  // document starts inside each row (besides 0)
};
// GoogleTest names each case by this (its default prints the struct's bytes, a heap pointer
// included).
void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "B=" << c.B << " T=" << c.T << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " D=" << c.D
      << " window=" << c.window;
  for (std::int64_t x : c.doc_begins) *os << " doc@" << x;
}

std::vector<std::int64_t> doc_starts(const AttentionCase& c) {
  std::vector<std::int64_t> out;
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int64_t cur = 0;
    for (std::int64_t t = 0; t < c.T; ++t) {
      for (std::int64_t x : c.doc_begins)
        if (x == t) cur = t;
      out.push_back(cur);
    }
  }
  return out;
}

class CudaAttention : public ::testing::TestWithParam<AttentionCase> {};

// The fp32 kernels (the parity path) against the CPU's on one problem, inputs from `seed`.
void expect_attention_matches_cpu(Backend& gpu, const AttentionCase& c, std::uint64_t seed) {
  const Shape qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.T, c.Hkv, c.D};
  Both q = both(gpu, qs, normal(qs.numel(), seed)), k = both(gpu, ks, normal(ks.numel(), seed + 1));
  Both v = both(gpu, ks, normal(ks.numel(), seed + 2));
  Both out = zeros(gpu, qs), lse = zeros(gpu, Shape{c.B, c.Hq, c.T});
  Both docs = both_i64(gpu, Shape{c.B * c.T}, doc_starts(c));
  const bool with_docs = !c.doc_begins.empty();
  const Tensor dc = with_docs ? docs.c.tensor() : Tensor(),
               dg = with_docs ? docs.g.tensor() : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  testing::cpu_backend().attention_forward(q.c, k.c, v.c, out.c, lse.c, c.window, scale, dc);
  gpu.attention_forward(q.g, k.g, v.g, out.g, lse.g, c.window, scale, dg);
  // Scores are D-term sums, outputs T-term weighted sums.
  EXPECT_LE(diff(gpu, out), reduction_bound(c.D + c.T)) << "out";
  EXPECT_LE(diff(gpu, lse), reduction_bound(c.D + c.T)) << "lse";

  Both dout = both(gpu, qs, normal(qs.numel(), seed + 3));
  Both dq = zeros(gpu, qs), dk = zeros(gpu, ks), dv = zeros(gpu, ks);
  testing::cpu_backend().attention_backward(q.c, k.c, v.c, out.c, lse.c, dout.c, dq.c, dk.c, dv.c,
                                            c.window, scale, dc);
  gpu.attention_backward(q.g, k.g, v.g, out.g, lse.g, dout.g, dq.g, dk.g, dv.g, c.window, scale,
                         dg);
  // dP and delta are D-term sums; dK and dV sum over the group's queries.
  const double bound = reduction_bound(2 * c.D + (c.Hq / c.Hkv) * c.T);
  EXPECT_LE(diff(gpu, dv), bound) << "dv";
  if (!every_query_sees_only_itself(c.B, c.T, c.window,
                                    with_docs ? doc_starts(c) : std::vector<std::int64_t>{})) {
    EXPECT_LE(diff(gpu, dq), bound) << "dq";
    EXPECT_LE(diff(gpu, dk), bound) << "dk";
    return;
  }
  const double residue = self_only_residue_bound(
      scale, c.D, c.Hq / c.Hkv, max_abs(get(gpu, dout.g)), max_abs(get(gpu, v.g)),
      std::max(max_abs(get(gpu, q.g)), max_abs(get(gpu, k.g))));
  expect_self_only_residue(residue, get(gpu, dq.g), get(gpu, dk.g),
                           get(testing::cpu_backend(), dq.c), get(testing::cpu_backend(), dk.c));
}

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  REQUIRE_CUDA(gpu);
  expect_attention_matches_cpu(gpu, GetParam(), 21);
}

// Problems drawn at random from TANDEM_TEST_SEED (default 1): lengths 1-200, GQA groups of 1-4,
// head_dims 1-256, no window, one shorter than the row or one longer, up to four document starts
// (the same in every row; single-token documents included).
TEST(CudaOps, AttentionOnRandomProblems) {
  REQUIRE_CUDA(gpu);
  const std::uint64_t seed = test_seed();
  std::mt19937_64 gen(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  for (int n = 0; n < 8; ++n) {
    const AttentionDraw d = draw_attention(gen, [](auto& draw) { return draw(1, 256); });
    AttentionCase c{d.B, d.T, d.Hq, d.Hkv, d.D, d.window, {}};
    if (uniform(0, 1) == 1 && c.T > 1)
      for (std::int64_t k = uniform(1, 4); k > 0; --k) c.doc_begins.push_back(uniform(1, c.T - 1));
    std::ostringstream name;
    PrintTo(c, &name);
    SCOPED_TRACE("TANDEM_TEST_SEED=" + std::to_string(seed) + " problem " + std::to_string(n) +
                 ": " + name.str());
    expect_attention_matches_cpu(gpu, c, seed * 100 + n);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(AttentionCase{2, 77, 6, 2, 16, 0, {}},              // GQA, full causal
                      AttentionCase{2, 77, 6, 2, 16, 5, {}},              // small window
                      AttentionCase{1, 300, 4, 1, 128, 64, {}},           // OLMo head_dim, MQA
                      AttentionCase{1, 150, 3, 3, 13, 0, {}},             // odd head_dim
                      AttentionCase{1, 64, 2, 1, 256, 0, {}},             // the largest head_dim
                      AttentionCase{2, 100, 4, 2, 32, 20, {30, 31, 70}},  // documents + window
                      AttentionCase{2, 70, 4, 2, 16, 1, {}},              // each query sees itself
                      AttentionCase{1, 90, 2, 1, 64, 0, {1, 45, 89}}));   // one-token documents

TEST(CudaOps, AttentionRejectsBadDocumentStarts) {
  REQUIRE_CUDA(gpu);
  const std::int64_t B = 1, T = 8, H = 1, D = 8;
  Buffer q = put(gpu, Shape{B, T, H, D}, normal(T * D, 25));
  Buffer out = put(gpu, Shape{B, T, H, D}, normal(T * D, 26));
  Buffer lse = put(gpu, Shape{B, H, T}, normal(T, 27));
  Buffer docs =
      put_i64(gpu, Shape{B * T}, {0, 0, 0, 5, 4, 4, 4, 4});  // starts after t=3, decreases
  EXPECT_THROW(
      {
        gpu.attention_forward(q, q, q, out, lse, 0, 0.5f, docs);
        gpu.synchronize();
      },
      core::Error);
}

// A kernel's refused request for more than 48 KB of shared memory fails with what it asked for
// and what the device allows (queried, not assumed), and leaves no error for the next launch.
TEST(CudaOps, RefusedSharedMemoryRequestSaysWhatWasAskedAndAllowed) {
  REQUIRE_GPU();
  int device = 0, limit = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  EXPECT_GT(limit, 48 * 1024);
  EXPECT_NO_THROW(kernels::cuda::check_smem_request(cudaSuccess, "some_kernel", 1 << 20));
  try {
    kernels::cuda::check_smem_request(cudaErrorInvalidValue, "some_kernel", 1 << 20);
    ADD_FAILURE() << "a refused request passed";
  } catch (const core::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("some_kernel needs 1048576 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("allows " + std::to_string(limit)), std::string::npos) << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaOps, ElementwiseOpsMatchCpu) {
  REQUIRE_CUDA(gpu);
  const std::int64_t n = 1000;
  Both g = both(gpu, Shape{n}, normal(n, 28, 3.0f)), u = both(gpu, Shape{n}, normal(n, 29));
  Both h = zeros(gpu, Shape{n});
  testing::cpu_backend().swiglu_forward(g.c, u.c, h.c);
  gpu.swiglu_forward(g.g, u.g, h.g);
  EXPECT_LE(diff(gpu, h), kElementwise);
  Both dh = both(gpu, Shape{n}, normal(n, 30)), dg = zeros(gpu, Shape{n});
  testing::cpu_backend().swiglu_backward(g.c, u.c, dh.c, dg.c,
                                         u.c);  // du aliasing u, as the model does
  gpu.swiglu_backward(g.g, u.g, dh.g, dg.g, u.g);
  EXPECT_LE(diff(gpu, dg), kElementwise);
  EXPECT_LE(diff(gpu, u), kElementwise);

  Both a = both(gpu, Shape{n}, normal(n, 31)), b = both(gpu, Shape{n}, normal(n, 32));
  testing::cpu_backend().add(a.c, b.c, a.c);  // y aliasing a
  gpu.add(a.g, b.g, a.g);
  EXPECT_TRUE(bit_identical(get(gpu, a.g), get(testing::cpu_backend(), a.c)));
  testing::cpu_backend().scale(a.c, 0.3f);
  gpu.scale(a.g, 0.3f);
  EXPECT_TRUE(bit_identical(get(gpu, a.g), get(testing::cpu_backend(), a.c)));
  testing::cpu_backend().fill(b.c, -2.5f);
  gpu.fill(b.g, -2.5f);
  EXPECT_TRUE(bit_identical(get(gpu, b.g), get(testing::cpu_backend(), b.c)));

  const std::int64_t rows = 40, d = 33;
  Both src = both(gpu, Shape{rows, d}, normal(rows * d, 33));
  Both index = both_i64(gpu, Shape{5}, {39, 0, 7, 7, 12});
  Both dst = zeros(gpu, Shape{5, d});
  testing::cpu_backend().gather_rows(src.c, index.c, dst.c);
  gpu.gather_rows(src.g, index.g, dst.g);
  EXPECT_TRUE(bit_identical(get(gpu, dst.g), get(testing::cpu_backend(), dst.c)));
  Buffer bad = put_i64(gpu, Shape{5}, {1, 2, 40, 3, 4});
  EXPECT_THROW(
      {
        gpu.gather_rows(src.g, bad, dst.g);
        get(gpu, dst.g);
      },
      core::Error);
}

TEST(CudaOps, FusedCrossEntropyMatchesCpuOverSeveralChunks) {
  REQUIRE_CUDA(gpu);
  const std::int64_t N = 300, d = 64, V = 1000;
  std::vector<std::int64_t> labels(N);
  for (std::int64_t n = 0; n < N; ++n) labels[n] = n % 7 == 3 ? -100 : (n * 31 + 5) % V;
  for (std::int64_t n = 128; n < 192; ++n) labels[n] = -100;  // a whole chunk of 64 ignored
  Both hidden = both(gpu, Shape{N, d}, normal(N * d, 34));
  Both w = both(gpu, Shape{V, d}, normal(V * d, 35, 0.2f));
  Both label = both_i64(gpu, Shape{N}, labels);
  for (const char* chunk : {"64", ""}) {  // several chunks (one all-ignored), then the default
    const testing::ScopedEnv rows("TANDEM_CUDA_LOGITS_CHUNK_ROWS", *chunk ? chunk : nullptr);
    Both dh = both(gpu, Shape{N, d}, normal(N * d, 36));  // overwritten
    Both dw = both(gpu, Shape{V, d}, normal(V * d, 37));  // accumulated
    const auto rc = testing::cpu_backend().lm_head_cross_entropy(hidden.c, w.c, label.c, 1e-4f,
                                                                 1.0f / N, dh.c, dw.c);
    const auto rg = gpu.lm_head_cross_entropy(hidden.g, w.g, label.g, 1e-4f, 1.0f / N, dh.g, dw.g);
    EXPECT_EQ(rg.count, rc.count);
    EXPECT_NEAR(rg.ce_sum, rc.ce_sum, reduction_bound(d) * std::fabs(rc.ce_sum)) << chunk;
    EXPECT_NEAR(rg.z_sum, rc.z_sum, reduction_bound(d) * std::fabs(rc.z_sum)) << chunk;
    EXPECT_LE(diff(gpu, dh), reduction_bound(V + d)) << chunk;
    EXPECT_LE(diff(gpu, dw), reduction_bound(N + d)) << chunk;
    // Loss only: no gradient outputs.
    const auto lg = gpu.lm_head_cross_entropy(hidden.g, w.g, label.g, 1e-4f, 1.0f, {}, {});
    EXPECT_EQ(lg.ce_sum, rg.ce_sum);
  }
  labels[3] = V;
  Buffer bad = put_i64(gpu, Shape{N}, labels);
  EXPECT_THROW(gpu.lm_head_cross_entropy(hidden.g, w.g, bad, 0.0f, 1.0f, {}, {}), core::Error);
}

TEST(CudaOps, TokenLogProbsMatchCpu) {
  REQUIRE_CUDA(gpu);
  const std::int64_t n = 20, V = 1000;
  Both logits = both(gpu, Shape{n, V}, normal(n * V, 38, 3.0f));
  std::vector<std::int64_t> t(n);
  for (std::int64_t i = 0; i < n; ++i) t[i] = (i * 97) % V;
  Both targets = both_i64(gpu, Shape{n}, t);
  const auto a = testing::cpu_backend().token_log_probs(logits.c, targets.c);
  const auto b = gpu.token_log_probs(logits.g, targets.g);
  ASSERT_EQ(a.size(), b.size());
  // Both in double over fp32 logits: V-term double sums, far below fp32 rounding.
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-12 * (1 + std::fabs(a[i])));
}

TEST(CudaOps, SumOfSquaresAndAdamWMatchCpuBitForBit) {
  REQUIRE_CUDA(gpu);
  for (std::int64_t n : {5, 16384 * 3 + 1234}) {
    Both x = both(gpu, Shape{n}, normal(n, 39));
    EXPECT_EQ(gpu.sum_of_squares(x.g), testing::cpu_backend().sum_of_squares(x.c)) << n;
  }
  // All at once (one copy to the host): each tensor's sum exactly as alone, and as the CPU's.
  std::vector<Both> xs;
  for (std::int64_t n : {5, 0, 16384, 16385, 16384 * 3 + 1234})
    xs.push_back(both(gpu, Shape{n}, normal(n, 50 + n)));
  std::vector<Tensor> on_gpu, on_cpu;
  for (const Both& x : xs) on_gpu.push_back(x.g), on_cpu.push_back(x.c);
  const std::vector<double> together = gpu.sums_of_squares(on_gpu);
  const std::vector<double> cpu_together = testing::cpu_backend().sums_of_squares(on_cpu);
  ASSERT_EQ(together.size(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(together[i], gpu.sum_of_squares(on_gpu[i])) << i;
    EXPECT_EQ(together[i], cpu_together[i]) << i;
  }
  EXPECT_EQ(together[1], 0.0);
  const std::int64_t n = 10007;
  std::vector<float> v0 = normal(n, 43);
  for (float& x : v0) x = x * x * 1e-4f;  // second moments are non-negative
  // Every arithmetic, with beta1 0.9 and 0.3 (torch's lerp at a weight >= 0.5).
  for (const kernels::AdamWArithmetic arithmetic :
       {kernels::AdamWArithmetic::torch_adamw, kernels::AdamWArithmetic::olmo_core_foreach,
        kernels::AdamWArithmetic::olmo_core_single}) {
    for (const double beta1 : {0.9, 0.3}) {
      for (bool decay : {false, true}) {
        Both p = both(gpu, Shape{n}, normal(n, 40)), g = both(gpu, Shape{n}, normal(n, 41, 0.01f));
        Both m = both(gpu, Shape{n}, normal(n, 42, 0.001f)), v = both(gpu, Shape{n}, v0);
        const kernels::AdamWScalars s = testing::adamw_scalars(2, decay, arithmetic, beta1);
        testing::cpu_backend().adamw_update(p.c, g.c, m.c, v.c, s);
        gpu.adamw_update(p.g, g.g, m.g, v.g, s);
        const std::string what = "arithmetic " + std::to_string(static_cast<int>(arithmetic)) +
                                 ", beta1 " + std::to_string(beta1) + ", decay " +
                                 std::to_string(decay);
        EXPECT_TRUE(bit_identical(get(gpu, p.g), get(testing::cpu_backend(), p.c))) << what;
        EXPECT_TRUE(bit_identical(get(gpu, m.g), get(testing::cpu_backend(), m.c))) << what;
        EXPECT_TRUE(bit_identical(get(gpu, v.g), get(testing::cpu_backend(), v.c))) << what;
      }
    }
  }
}

// Every parameter tensor's update in one launch (blocks of 2048 elements of one tensor): tensors
// smaller than a block, one block exactly, one element past it, several blocks with a tail, one
// at an odd offset (element by element) and decay on some: the CPU's bits, in every arithmetic.
TEST(CudaOps, AdamWOverManyTensorsInOneLaunchMatchesCpuBitForBit) {
  REQUIRE_CUDA(gpu);
  const std::vector<std::int64_t> sizes = {1, 7, 2048, 2049, 3 * 2048 + 5, 10007};
  const std::vector<std::int64_t> offsets = {0, 0, 0, 0, 1, 0};
  std::vector<Buffer> owned_g, owned_c;
  std::vector<kernels::AdamWRun> on_gpu, on_cpu;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t n = sizes[i], at = offsets[i];
    const Shape whole{n + at}, run{n};
    std::vector<float> v0 = normal(n + at, 100 + 4 * i);
    for (float& x : v0) x = x * x * 1e-4f;
    const std::vector<std::vector<float>> init = {normal(n + at, 101 + 4 * i),
                                                  normal(n + at, 102 + 4 * i, 0.01f),
                                                  normal(n + at, 103 + 4 * i, 0.001f), v0};
    std::array<Tensor, 4> g_views, c_views;
    for (std::size_t k = 0; k < 4; ++k) {
      owned_g.push_back(put(gpu, whole, init[k]));
      owned_c.push_back(put(testing::cpu_backend(), whole, init[k]));
      g_views[k] = owned_g.back().tensor().view(at, run);
      c_views[k] = owned_c.back().tensor().view(at, run);
    }
    const bool decay = i % 2 == 0;
    on_gpu.push_back({g_views[0], g_views[1], g_views[2], g_views[3], decay});
    on_cpu.push_back({c_views[0], c_views[1], c_views[2], c_views[3], decay});
  }
  // Steps 1-2 in torch's arithmetic, 3-4 in OLMo-core's foreach one, 5-6 in its single-tensor one.
  for (int step = 1; step <= 6; ++step) {
    const kernels::AdamWScalars s =
        testing::adamw_scalars(step, false,  // the runs' decay
                               static_cast<kernels::AdamWArithmetic>((step - 1) / 2));
    gpu.adamw_updates(on_gpu, s);
    testing::cpu_backend().adamw_updates(on_cpu, s);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(bit_identical(get(gpu, on_gpu[i].p), get(testing::cpu_backend(), on_cpu[i].p)))
          << "p of tensor " << i << ", step " << step;
      EXPECT_TRUE(bit_identical(get(gpu, on_gpu[i].m), get(testing::cpu_backend(), on_cpu[i].m)))
          << "m of tensor " << i << ", step " << step;
      EXPECT_TRUE(bit_identical(get(gpu, on_gpu[i].v), get(testing::cpu_backend(), on_cpu[i].v)))
          << "v of tensor " << i << ", step " << step;
    }
  }
  // The elements around the odd-offset view are not touched.
  EXPECT_EQ(get(gpu, owned_g[4 * 4].tensor())[0], normal(sizes[4] + 1, 101 + 4 * 4)[0]);
}

TEST(CudaOps, MemoryRoundTripsAndCachingAllocator) {
  REQUIRE_CUDA(gpu);
  EXPECT_FALSE(gpu.host_accessible());
  const std::vector<float> values = normal(5000, 44);
  Buffer a = put(gpu, Shape{5000}, values);
  Buffer b = gpu.allocate(DType::f32, Shape{5000});
  gpu.copy(b, a);
  EXPECT_TRUE(bit_identical(get(gpu, b), values));
  gpu.zero(b);
  EXPECT_EQ(get(gpu, b), std::vector<float>(5000, 0.0f));
  const kernels::MemoryStats before = gpu.memory_stats();
  EXPECT_GT(before.in_use, 0);
  EXPECT_GE(before.peak_in_use, before.in_use);
  EXPECT_GE(before.reserved, before.in_use);
  // A freed block of the same size is reused: no new device memory for a repeated allocation.
  for (int i = 0; i < 10; ++i) {
    Buffer t = gpu.allocate(DType::f32, Shape{1 << 20});
    gpu.zero(t);
  }
  const kernels::MemoryStats after = gpu.memory_stats();
  EXPECT_LE(after.reserved, before.reserved + (std::int64_t{4} << 20) + (std::int64_t{2} << 20));
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_GT(gpu.peak_flops(DType::f32), 1e12);
  EXPECT_GT(gpu.peak_flops(DType::bf16), gpu.peak_flops(DType::f32));
  EXPECT_NE(gpu.describe().find("cuda: "), std::string::npos);
}

// An allocation larger than the device is out of memory (core::OutOfMemory, which a caller may
// answer with less: cuDNN's workspace, `--layers fit`), says what it asked for, and leaves the
// backend usable (the failed cudaMalloc's error cleared).
TEST(CudaOps, AnAllocationLargerThanTheDeviceIsOutOfMemory) {
  REQUIRE_CUDA(gpu);
  const kernels::MemoryStats m = gpu.memory_stats();
  ASSERT_GT(m.device_total, 0);
  try {
    Buffer too_big = gpu.allocate(DType::f32, Shape{m.device_total / 4 + (1 << 20)});
    ADD_FAILURE() << "allocated more than the device's " << m.device_total << " B";
  } catch (const core::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate"), std::string::npos) << e.what();
  }
  const std::vector<float> values = normal(1000, 45);
  Buffer after = put(gpu, Shape{1000}, values);
  EXPECT_TRUE(bit_identical(get(gpu, after), values));
}

}  // namespace
}  // namespace tandem::cuda_testing
