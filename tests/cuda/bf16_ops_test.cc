// The bf16 half of the precision policy (docs/precision.md) on the CUDA backend: every op with
// bf16 activations, weights and activation gradients (f32 statistics and weight gradients), on
// bf16-representable random inputs, checked two ways.
// 1. Against the same op in fp32 on the GPU, fed the same values. Ops that compute in fp32 on
//    exactly widened inputs and round each output once must give exactly bf16(fp32 result), bit
//    for bit: the property tests/kernels/bf16_test.cc checks on the CPU. Attention runs on the
//    plain kernels for this (TANDEM_CUDA_ATTENTION=plain); cuDNN's fused kernel is checked in 2.
//    GEMMs accumulate bf16 products (exact in fp32) in another order than the fp32 GEMM: the CPU
//    test's bound, one bf16 rounding u = 2^-8 plus 1e-5, as a relative L2 error.
// 2. Against the CPU backend's bf16 op on the same inputs. Where the fp32 ops agree bit for bit
//    (copies, add, embedding and its gradient, casts) the bf16 ones must too. Elsewhere the two
//    fp32 results differ by far less than a bf16 ulp (ops_test.cc's bounds), so each bf16 output
//    must be the CPU's value or one of its two bf16 neighbours. GEMM outputs: ||a - b|| <=
//    ||a - f_gpu|| + ||f_gpu - f_cpu|| + ||f_cpu - b||, each term bounded as above.
// Without a GPU every test skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <utility>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/core/bfloat16.h"

namespace tandem::cuda_testing {
namespace {

constexpr double kBf16U = 1.0 / 256.0;  // bf16's unit roundoff: 8 significant bits
constexpr double kGemmBound = kBf16U + 1e-5;

std::uint16_t to_bits(float v) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
  return core::is_nan_bits(b) ? std::uint16_t{0xFFFF} : core::bf16_round_bits(b);
}

// Normal random values rounded to bf16, so that f32 and bf16 tensors hold the same numbers.
std::vector<float> bf16_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v = normal(n, seed, scale);
  for (float& x : v) x = core::bf16_bits_to_f32(to_bits(x));
  return v;
}

// The same values as f32 and as bf16, on the CPU and on the GPU.
struct Quad {
  Buffer cf, cb, gf, gb;  // cpu f32, cpu bf16, gpu f32, gpu bf16
};

Buffer bf16_on(Backend& b, Shape shape, const std::vector<float>& values) {
  Buffer wide = put(b, shape, values);
  Buffer narrow = b.allocate(DType::bf16, shape);
  b.cast(narrow, wide);
  return narrow;
}

Quad quad(Backend& gpu, Shape shape, const std::vector<float>& values) {
  return {put(testing::cpu_backend(), shape, values),
          bf16_on(testing::cpu_backend(), shape, values), put(gpu, shape, values),
          bf16_on(gpu, shape, values)};
}
Quad quad_zeros(Backend& gpu, Shape shape) {
  return quad(gpu, shape, std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.0f));
}
Quad quad_i64(Backend& gpu, Shape shape, const std::vector<std::int64_t>& values) {
  return {put_i64(testing::cpu_backend(), shape, values),
          put_i64(testing::cpu_backend(), shape, values), put_i64(gpu, shape, values),
          put_i64(gpu, shape, values)};
}

// The raw 16-bit patterns of a bf16 tensor.
std::vector<std::uint16_t> bits(Backend& b, const Tensor& t) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(t.numel()));
  b.download(out.data(), t);
  return out;
}
// A bf16 or f32 tensor's values as floats.
std::vector<float> values(Backend& b, const Tensor& t) {
  if (t.dtype() == DType::f32) return get(b, t);
  Buffer wide = b.allocate(DType::f32, t.shape());
  b.cast(wide, t);
  return get(b, wide);
}

// Bit for bit: the GPU's bf16 output is its fp32 output rounded once.
void expect_rounded(Backend& gpu, const Quad& q, const char* what) {
  const std::vector<float> f = get(gpu, q.gf);
  const std::vector<std::uint16_t> b = bits(gpu, q.gb);
  ASSERT_EQ(f.size(), b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < f.size(); ++i) bad += b[i] != to_bits(f[i]);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << f.size()
                     << " bf16 values are not the rounded fp32 result";
}

// bf16 patterns as integers ordered like the values they hold (so neighbours differ by 1).
std::int32_t ordered(std::uint16_t b) {
  return (b & 0x8000) ? -static_cast<std::int32_t>(b & 0x7FFF) : static_cast<std::int32_t>(b);
}

// The GPU's and the CPU's bf16 outputs: equal (exact) or at most one bf16 step apart. An output
// of a reduction that cancels to (nearly) zero is within the fp32 results' own difference of each
// other instead: `reduction_terms` > 0 allows each value that far from the CPU's, the fp32 bound of
// cuda_test_util.h times the largest CPU value. (Attention's first query row sees one key, so its
// dS = P (dP - delta) is exactly zero: one backend gets 0, the other 1e-7 from summing delta in
// another order, and those are thousands of bf16 steps apart.)
void expect_bf16_close(Backend& gpu, const Quad& q, bool exact, const char* what,
                       double reduction_terms = 0) {
  const std::vector<std::uint16_t> g = bits(gpu, q.gb), c = bits(testing::cpu_backend(), q.cb);
  ASSERT_EQ(g.size(), c.size());
  double largest = 0.0;
  for (std::uint16_t b : c)
    largest = std::max(largest, std::fabs(double{core::bf16_bits_to_f32(b)}));
  const double floor = reduction_terms > 0 ? reduction_bound(reduction_terms) * largest : 0.0;
  std::size_t differ = 0, far = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    differ += g[i] != c[i];
    const double apart =
        std::fabs(double{core::bf16_bits_to_f32(g[i])} - double{core::bf16_bits_to_f32(c[i])});
    far += std::abs(ordered(g[i]) - ordered(c[i])) > 1 && apart > floor;
  }
  if (exact) {
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << g.size() << " values differ";
  }
  EXPECT_EQ(far, 0u) << what << ": " << far << " of " << g.size()
                     << " values are more than one bf16 step from the CPU's";
}

double gpu_vs_cpu(Backend& gpu, const Tensor& g, const Tensor& c) {
  return rel_l2(values(gpu, g), values(testing::cpu_backend(), c));
}
// Two tensors of the GPU (its bf16 result against its fp32 one).
double gpu_vs_gpu(Backend& gpu, const Tensor& a, const Tensor& b) {
  return rel_l2(values(gpu, a), values(gpu, b));
}

TEST(CudaBf16, CastGivesTorchsBitsAndWidensExactly) {
  REQUIRE_CUDA(gpu);
  // Ties both ways, overflow to infinity, subnormals, infinities, NaNs (0xFFFF, torch's bits),
  // and random patterns: the same bits as the CPU backend's cast.
  std::vector<std::uint32_t> patterns = {0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                         0x00000001u, 0x80008000u, 0x00018000u, 0x7F800000u,
                                         0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u,
                                         0x3F80FFFFu, 0x00000000u, 0x80000000u};
  std::mt19937_64 gen(1);
  for (int i = 0; i < 20000; ++i) patterns.push_back(static_cast<std::uint32_t>(gen()));
  const std::int64_t n = static_cast<std::int64_t>(patterns.size());
  std::vector<float> f(patterns.size());
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = std::bit_cast<float>(patterns[i]);
  Buffer src_g = put(gpu, Shape{n}, f), src_c = put(testing::cpu_backend(), Shape{n}, f);
  Buffer dst_g = gpu.allocate(DType::bf16, Shape{n}),
         dst_c = testing::cpu_backend().allocate(DType::bf16, Shape{n});
  gpu.cast(dst_g, src_g);
  testing::cpu_backend().cast(dst_c, src_c);
  const std::vector<std::uint16_t> g = bits(gpu, dst_g), c = bits(testing::cpu_backend(), dst_c);
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_EQ(g[i], c[i]) << "input bits 0x" << std::hex << patterns[i];
  EXPECT_EQ(g[0], 0x3F80);   // tie to even: down
  EXPECT_EQ(g[1], 0x3F82);   // tie to even: up
  EXPECT_EQ(g[2], 0x7F80);   // overflow to +inf
  EXPECT_EQ(g[9], 0xFFFF);   // NaN
  EXPECT_EQ(g[10], 0xFFFF);  // negative NaN with a payload

  // Widening every pattern is exact (NaNs stay NaNs).
  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t b = 0; b < 0x10000; ++b) all[b] = static_cast<std::uint16_t>(b);
  Buffer narrow = gpu.allocate(DType::bf16, Shape{0x10000});
  gpu.upload(narrow, all.data());
  Buffer wide = gpu.allocate(DType::f32, Shape{0x10000});
  gpu.cast(wide, narrow);
  const std::vector<float> w = get(gpu, wide);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float expected = core::bf16_bits_to_f32(static_cast<std::uint16_t>(b));
    if (std::isnan(expected))
      ASSERT_TRUE(std::isnan(w[b])) << std::hex << b;
    else
      ASSERT_EQ(std::bit_cast<std::uint32_t>(w[b]), std::bit_cast<std::uint32_t>(expected))
          << std::hex << b;
  }
  // The same dtype is a copy.
  Buffer copy = gpu.allocate(DType::bf16, Shape{0x10000});
  gpu.cast(copy, narrow);
  EXPECT_EQ(bits(gpu, copy), all);
}

TEST(CudaBf16, LinearForwardAndBackward) {
  REQUIRE_CUDA(gpu);
  const std::int64_t T = 45, in = 96, out = 80;
  Quad x = quad(gpu, Shape{T, in}, bf16_values(T * in, 1));
  Quad w = quad(gpu, Shape{out, in}, bf16_values(out * in, 2, 0.2f));
  Quad y = quad_zeros(gpu, Shape{T, out});
  gpu.linear_forward(x.gf, w.gf, y.gf);
  gpu.linear_forward(x.gb, w.gb, y.gb);
  testing::cpu_backend().linear_forward(x.cf, w.cf, y.cf);
  testing::cpu_backend().linear_forward(x.cb, w.cb, y.cb);
  EXPECT_LE(gpu_vs_gpu(gpu, y.gb, y.gf), kGemmBound);
  EXPECT_LE(gpu_vs_cpu(gpu, y.gb, y.cb), 2 * kGemmBound + reduction_bound(in));
  for (bool accumulate : {false, true}) {
    Quad dy = quad(gpu, Shape{T, out}, bf16_values(T * out, 3));
    Quad dx = quad(gpu, Shape{T, in}, bf16_values(T * in, 4));  // accumulated into, when asked
    Quad dw = quad_zeros(gpu, Shape{out, in});
    // Weight gradients are f32 under bf16 too: the bf16 run writes into f32 buffers.
    Buffer dw_gb = put(gpu, Shape{out, in}, std::vector<float>(out * in, 0.0f));
    Buffer dw_cb = put(testing::cpu_backend(), Shape{out, in}, std::vector<float>(out * in, 0.0f));
    gpu.linear_backward(x.gf, w.gf, dy.gf, dx.gf, dw.gf, accumulate);
    gpu.linear_backward(x.gb, w.gb, dy.gb, dx.gb, dw_gb, accumulate);
    testing::cpu_backend().linear_backward(x.cf, w.cf, dy.cf, dx.cf, dw.cf, accumulate);
    testing::cpu_backend().linear_backward(x.cb, w.cb, dy.cb, dx.cb, dw_cb, accumulate);
    EXPECT_LE(gpu_vs_gpu(gpu, dx.gb, dx.gf), kGemmBound) << "accumulate " << accumulate;
    EXPECT_LE(gpu_vs_cpu(gpu, dx.gb, dx.cb), 2 * kGemmBound + reduction_bound(out + 1))
        << "accumulate " << accumulate;
    // f32 sums of the same exact products: only the order differs.
    EXPECT_LE(gpu_vs_gpu(gpu, dw_gb, dw.gf), reduction_bound(T));
    EXPECT_LE(gpu_vs_cpu(gpu, dw_gb, dw_cb), reduction_bound(T));
  }
}

TEST(CudaBf16, RmsNormIsTheRoundedFp32Result) {
  REQUIRE_CUDA(gpu);
  for (std::int64_t d : {13, 512}) {
    const std::int64_t rows = 300;
    Quad x = quad(gpu, Shape{rows, d}, bf16_values(rows * d, 5, 2.0f));
    Quad w = quad(gpu, Shape{d}, bf16_values(d, 6));
    Quad y = quad_zeros(gpu, Shape{rows, d}), rstd = quad_zeros(gpu, Shape{rows});
    Buffer rstd_gb = put(gpu, Shape{rows}, std::vector<float>(rows, 0.0f));
    Buffer rstd_cb = put(testing::cpu_backend(), Shape{rows}, std::vector<float>(rows, 0.0f));
    gpu.rmsnorm_forward(x.gf, w.gf, y.gf, rstd.gf, 1e-6f);
    gpu.rmsnorm_forward(x.gb, w.gb, y.gb, rstd_gb, 1e-6f);
    testing::cpu_backend().rmsnorm_forward(x.cb, w.cb, y.cb, rstd_cb, 1e-6f);
    expect_rounded(gpu, y, "rmsnorm y");
    expect_bf16_close(gpu, y, false, "rmsnorm y vs cpu");
    EXPECT_TRUE(bit_identical(get(gpu, rstd_gb), get(gpu, rstd.gf)));  // fp32 statistics
    EXPECT_LE(rel_l2(get(gpu, rstd_gb), get(testing::cpu_backend(), rstd_cb)), kElementwise);

    Quad dy = quad(gpu, Shape{rows, d}, bf16_values(rows * d, 7));
    Quad dx = quad_zeros(gpu, Shape{rows, d});
    Buffer dw_gf = put(gpu, Shape{d}, std::vector<float>(d, 0.0f));
    Buffer dw_gb = put(gpu, Shape{d}, std::vector<float>(d, 0.0f));
    Buffer dw_cb = put(testing::cpu_backend(), Shape{d}, std::vector<float>(d, 0.0f));
    gpu.rmsnorm_backward(x.gf, w.gf, rstd.gf, dy.gf, dx.gf, dw_gf);
    gpu.rmsnorm_backward(x.gb, w.gb, rstd_gb, dy.gb, dx.gb, dw_gb);
    testing::cpu_backend().rmsnorm_backward(x.cb, w.cb, rstd_cb, dy.cb, dx.cb, dw_cb);
    expect_rounded(gpu, dx, "rmsnorm dx");
    expect_bf16_close(gpu, dx, false, "rmsnorm dx vs cpu");
    EXPECT_TRUE(bit_identical(get(gpu, dw_gb), get(gpu, dw_gf)));  // f32 sums of the same values
    EXPECT_LE(rel_l2(get(gpu, dw_gb), get(testing::cpu_backend(), dw_cb)), kElementwise);
  }
}

TEST(CudaBf16, RopeIsTheRoundedFp32Result) {
  REQUIRE_CUDA(gpu);
  const std::int64_t B = 2, T = 17, H = 3, D = 10, P = 40;
  std::vector<float> cos(P * D / 2), sin(P * D / 2);
  for (std::size_t i = 0; i < cos.size(); ++i) {
    cos[i] = std::cos(0.37f * static_cast<float>(i));
    sin[i] = std::sin(0.37f * static_cast<float>(i));
  }
  Buffer cg = put(gpu, Shape{P, D / 2}, cos), sg = put(gpu, Shape{P, D / 2}, sin);
  Buffer cc = put(testing::cpu_backend(), Shape{P, D / 2}, cos),
         sc = put(testing::cpu_backend(), Shape{P, D / 2}, sin);
  std::vector<std::int64_t> pos(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) pos[i] = (i * 13) % P;
  Buffer pg = put_i64(gpu, Shape{B * T}, pos),
         pc = put_i64(testing::cpu_backend(), Shape{B * T}, pos);
  for (bool with_positions : {false, true}) {
    const Tensor pgt = with_positions ? pg.tensor() : Tensor();
    const Tensor pct = with_positions ? pc.tensor() : Tensor();
    Quad x = quad(gpu, Shape{B, T, H, D}, bf16_values(B * T * H * D, 8));
    gpu.rope_forward(x.gf, cg, sg, pgt);
    gpu.rope_forward(x.gb, cg, sg, pgt);
    testing::cpu_backend().rope_forward(x.cb, cc, sc, pct);
    expect_rounded(gpu, x, "rope forward");
    expect_bf16_close(gpu, x, false, "rope forward vs cpu");
    Quad dx = quad(gpu, Shape{B, T, H, D}, bf16_values(B * T * H * D, 9));
    gpu.rope_backward(dx.gf, cg, sg, pgt);
    gpu.rope_backward(dx.gb, cg, sg, pgt);
    testing::cpu_backend().rope_backward(dx.cb, cc, sc, pct);
    expect_rounded(gpu, dx, "rope backward");
    expect_bf16_close(gpu, dx, false, "rope backward vs cpu");
  }
}

struct Bf16AttentionCase {
  std::int64_t B, T, Hq, Hkv, D, window;
  bool documents;
};
// GoogleTest names each case by this (its default prints the struct's bytes, padding included).
void PrintTo(const Bf16AttentionCase& c, std::ostream* os) {
  *os << "B=" << c.B << " T=" << c.T << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " D=" << c.D
      << " window=" << c.window << (c.documents ? " documents" : "");
}

class CudaBf16Attention : public ::testing::TestWithParam<Bf16AttentionCase> {};

// The plain kernels: the rounded fp32 result, bit for bit, and the CPU's within one bf16 step.
TEST_P(CudaBf16Attention, PlainKernelsAreTheRoundedFp32Result) {
  const testing::ScopedEnv plain("TANDEM_CUDA_ATTENTION", "plain");
  REQUIRE_CUDA(gpu);
  const Bf16AttentionCase& c = GetParam();
  const Shape qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.T, c.Hkv, c.D}, ls{c.B, c.Hq, c.T};
  Quad q = quad(gpu, qs, bf16_values(qs.numel(), 11)),
       k = quad(gpu, ks, bf16_values(ks.numel(), 12));
  Quad v = quad(gpu, ks, bf16_values(ks.numel(), 13)), o = quad_zeros(gpu, qs);
  Quad lse = quad_zeros(gpu, ls);
  Buffer lse_gb = put(gpu, ls, std::vector<float>(ls.numel(), 0.0f));
  Buffer lse_cb = put(testing::cpu_backend(), ls, std::vector<float>(ls.numel(), 0.0f));
  const std::vector<std::int64_t> docs = two_documents_per_row(c.B, c.T);
  Buffer dg = put_i64(gpu, Shape{c.B * c.T}, docs),
         dc = put_i64(testing::cpu_backend(), Shape{c.B * c.T}, docs);
  const Tensor dgt = c.documents ? dg.tensor() : Tensor(),
               dct = c.documents ? dc.tensor() : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  gpu.attention_forward(q.gf, k.gf, v.gf, o.gf, lse.gf, c.window, scale, dgt);
  gpu.attention_forward(q.gb, k.gb, v.gb, o.gb, lse_gb, c.window, scale, dgt);
  testing::cpu_backend().attention_forward(q.cb, k.cb, v.cb, o.cb, lse_cb, c.window, scale, dct);
  expect_rounded(gpu, o, "attention out");
  expect_bf16_close(gpu, o, false, "attention out vs cpu", double(c.D + c.T));
  EXPECT_TRUE(bit_identical(get(gpu, lse_gb), get(gpu, lse.gf)));
  EXPECT_LE(rel_l2(get(gpu, lse_gb), get(testing::cpu_backend(), lse_cb)),
            reduction_bound(c.D + c.T));

  // The backward reads the saved output: the fp32 run gets the same bf16-rounded one.
  gpu.cast(o.gf, o.gb);
  Quad dout = quad(gpu, qs, bf16_values(qs.numel(), 14));
  Quad dq = quad_zeros(gpu, qs), dk = quad_zeros(gpu, ks), dv = quad_zeros(gpu, ks);
  gpu.attention_backward(q.gf, k.gf, v.gf, o.gf, lse.gf, dout.gf, dq.gf, dk.gf, dv.gf, c.window,
                         scale, dgt);
  gpu.attention_backward(q.gb, k.gb, v.gb, o.gb, lse_gb, dout.gb, dq.gb, dk.gb, dv.gb, c.window,
                         scale, dgt);
  testing::cpu_backend().attention_backward(q.cb, k.cb, v.cb, o.cb, lse_cb, dout.cb, dq.cb, dk.cb,
                                            dv.cb, c.window, scale, dct);
  expect_rounded(gpu, dq, "attention dq");
  expect_rounded(gpu, dk, "attention dk");
  expect_rounded(gpu, dv, "attention dv");
  // The terms of ops_test.cc's fp32 attention bound: dP and delta are D-term sums, dK and dV
  // sum over the group's queries.
  const double terms = double(2 * c.D + (c.Hq / c.Hkv) * c.T);
  expect_bf16_close(gpu, dq, false, "attention dq vs cpu", terms);
  expect_bf16_close(gpu, dk, false, "attention dk vs cpu", terms);
  expect_bf16_close(gpu, dv, false, "attention dv vs cpu", terms);
}

// A bf16 attention path that rounds like cuDNN's fused SDPA against the CPU's bf16 op. cuDNN (and
// tandem's tensor-core kernels) round the probabilities (forward) and P and dS (backward) to bf16
// before their GEMMs: one more rounding of at most u per term, and one of the output, so each
// output is within 2u of the fp32 result relative to its terms; with the factor 2 of
// cuda_test_util.h between the terms' magnitudes and the result's norm, 4u, plus the fp32 bound.
// `doc_starts` (a document start per token, empty for none) masks across documents. Returns the
// distances (output, lse, dq, dk, dv) for the caller to record.
std::array<double, 5> check_within_cudnn_rounding(kernels::Backend& gpu, const Bf16AttentionCase& c,
                                                  const std::vector<std::int64_t>& doc_starts,
                                                  std::uint64_t seed = 21) {
  std::array<double, 5> distances{};
  const Shape qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.T, c.Hkv, c.D}, ls{c.B, c.Hq, c.T};
  Quad q = quad(gpu, qs, bf16_values(qs.numel(), seed)),
       k = quad(gpu, ks, bf16_values(ks.numel(), seed + 1));
  Quad v = quad(gpu, ks, bf16_values(ks.numel(), seed + 2)), o = quad_zeros(gpu, qs);
  Buffer lse_g = put(gpu, ls, std::vector<float>(ls.numel(), 0.0f));
  Buffer lse_c = put(testing::cpu_backend(), ls, std::vector<float>(ls.numel(), 0.0f));
  const bool documents = !doc_starts.empty();
  const std::vector<std::int64_t> none(static_cast<std::size_t>(c.B * c.T), 0);
  Buffer dg = put_i64(gpu, Shape{c.B * c.T}, documents ? doc_starts : none),
         dc = put_i64(testing::cpu_backend(), Shape{c.B * c.T}, documents ? doc_starts : none);
  const Tensor dgt = documents ? dg.tensor() : Tensor(), dct = documents ? dc.tensor() : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  gpu.attention_forward(q.gb, k.gb, v.gb, o.gb, lse_g, c.window, scale, dgt);
  testing::cpu_backend().attention_forward(q.cb, k.cb, v.cb, o.cb, lse_c, c.window, scale, dct);
  const double fwd = 4 * kBf16U + reduction_bound(c.D + c.T);
  distances[0] = gpu_vs_cpu(gpu, o.gb, o.cb);
  distances[1] = rel_l2(get(gpu, lse_g), get(testing::cpu_backend(), lse_c));
  EXPECT_LE(distances[0], fwd) << "attention out";
  EXPECT_LE(distances[1], reduction_bound(c.D + c.T)) << "attention lse";

  Quad dout = quad(gpu, qs, bf16_values(qs.numel(), seed + 3));
  Quad dq = quad_zeros(gpu, qs), dk = quad_zeros(gpu, ks), dv = quad_zeros(gpu, ks);
  // Both read the CPU's output (the saved activation), so only the backward differs.
  gpu.upload(o.gb, bits(testing::cpu_backend(), o.cb).data());
  gpu.attention_backward(q.gb, k.gb, v.gb, o.gb, lse_g, dout.gb, dq.gb, dk.gb, dv.gb, c.window,
                         scale, dgt);
  testing::cpu_backend().attention_backward(q.cb, k.cb, v.cb, o.cb, lse_c, dout.cb, dq.cb, dk.cb,
                                            dv.cb, c.window, scale, dct);
  const double bwd = 4 * kBf16U + reduction_bound(2 * c.D + (c.Hq / c.Hkv) * c.T);
  distances[2] = gpu_vs_cpu(gpu, dq.gb, dq.cb);
  distances[3] = gpu_vs_cpu(gpu, dk.gb, dk.cb);
  distances[4] = gpu_vs_cpu(gpu, dv.gb, dv.cb);
  EXPECT_LE(distances[4], bwd) << "attention dv";
  bool single_token_documents = documents;
  for (std::int64_t i = 0; documents && i < c.B * c.T; ++i)
    single_token_documents = single_token_documents && doc_starts[i] == i % c.T;
  const bool self_only = c.T == 1 || c.window == 1 || single_token_documents;
  if (!self_only) {
    EXPECT_LE(distances[2], bwd) << "attention dq";
    EXPECT_LE(distances[3], bwd) << "attention dk";
    return distances;
  }
  // Every query sees only itself: P = 1, dS = dP - delta = dout.v - dout.out = 0 exactly, so dq
  // and dk are fp32 cancellation residue and a relative distance says nothing. Both sides must
  // keep that residue within the fp32 bound of the two D-term dot products (|dS| <= 2 *
  // reduction_bound(D) * D max|dout| max|v|), times scale, max|q| or max|k|, and the group's
  // queries that dk sums.
  auto max_abs = [&](Backend& b, const Tensor& t) {
    double m = 0;
    for (float x : values(b, t)) m = std::max(m, double(std::fabs(x)));
    return m;
  };
  const double ds =
      2 * reduction_bound(double(c.D)) * double(c.D) * max_abs(gpu, dout.gb) * max_abs(gpu, v.gb);
  const double residue =
      scale * ds * std::max(max_abs(gpu, q.gb), max_abs(gpu, k.gb)) * double(c.Hq / c.Hkv);
  EXPECT_LE(max_abs(gpu, dq.gb), residue) << "self-only dq";
  EXPECT_LE(max_abs(gpu, dk.gb), residue) << "self-only dk";
  EXPECT_LE(max_abs(testing::cpu_backend(), dq.cb), residue) << "self-only dq, CPU";
  EXPECT_LE(max_abs(testing::cpu_backend(), dk.cb), residue) << "self-only dk, CPU";
  distances[2] = distances[3] = 0;  // not distances: checked as residue above
  return distances;
}

// The case's problem (its documents: two per row) checked and its distances recorded
// (`<prefix>_out`, ...) for the device check's JSON.
void expect_within_cudnn_rounding(const Bf16AttentionCase& c, const std::string& prefix) {
  REQUIRE_CUDA(gpu);
  const std::array<double, 5> d = check_within_cudnn_rounding(
      gpu, c, c.documents ? two_documents_per_row(c.B, c.T) : std::vector<std::int64_t>{});
  const char* names[5] = {"_out", "_lse", "_dq", "_dk", "_dv"};
  for (int i = 0; i < 5; ++i)
    ::testing::Test::RecordProperty(prefix + names[i], std::to_string(d[i]));
  ::testing::Test::RecordProperty("attention_path", gpu.describe());
}

// The default path: cuDNN's fused SDPA where it is loaded and takes the problem, else tandem's
// tensor-core kernels (the plain kernels above head_dim 128).
TEST_P(CudaBf16Attention, DefaultPathMatchesTheCpu) {
  expect_within_cudnn_rounding(GetParam(), "default");
}

// tandem's tensor-core kernels (attention_flash.cu) on every problem, cuDNN not opened: the path
// taken where cuDNN is missing or refuses, and for documents.
TEST_P(CudaBf16Attention, TensorCoreKernelsMatchTheCpu) {
  const testing::ScopedEnv flash("TANDEM_CUDA_ATTENTION", "flash");
  expect_within_cudnn_rounding(GetParam(), "flash");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBf16Attention,
    ::testing::Values(Bf16AttentionCase{2, 77, 6, 2, 64, 0, false},     // GQA, full causal
                      Bf16AttentionCase{2, 77, 6, 2, 64, 5, false},     // small window
                      Bf16AttentionCase{1, 300, 4, 1, 128, 64, false},  // OLMo head_dim, MQA
                      Bf16AttentionCase{2, 100, 4, 2, 32, 20, true},    // documents + window
                      // head_dims the tensor-core kernels pad (to 16, 64, 128), loading
                      // rows element by element (12, 100) or in 16-byte pieces (40, 80); T a
                      // multiple of their 64-row tiles (128)
                      Bf16AttentionCase{1, 45, 4, 4, 12, 0, true},
                      Bf16AttentionCase{1, 130, 6, 3, 80, 33, false},
                      Bf16AttentionCase{2, 128, 4, 2, 40, 70, true},
                      Bf16AttentionCase{1, 128, 2, 1, 100, 0, false}));

// Problems drawn at random from TANDEM_TEST_SEED (default 1): lengths from 1 to 200, GQA groups
// of 1-4, head_dims 1-128 (multiples of 8 half the time: the 16-byte loads), no window, one
// shorter than the row or one longer, and up to five documents per row of random lengths
// (single-token ones included). Each on tandem's tensor-core kernels and on the default path
// (cuDNN's on the device where it takes the problem).
TEST(CudaBf16, AttentionOnRandomProblems) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 gen(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  double worst[2][5] = {};  // [tensor-core kernels, default path][out, lse, dq, dk, dv]
  for (int n = 0; n < 8; ++n) {
    const AttentionDraw d = draw_attention(gen, [](auto& uniform) {
      return uniform(0, 1) == 0 ? 8 * uniform(1, 16) : uniform(1, 128);
    });
    const Bf16AttentionCase c{d.B, d.T, d.Hq, d.Hkv, d.D, d.window, false};
    std::vector<std::int64_t> starts;
    if (uniform(0, 4) >= 2) {
      starts.resize(static_cast<std::size_t>(c.B * c.T));
      for (std::int64_t b = 0; b < c.B; ++b) {
        std::vector<bool> begins(static_cast<std::size_t>(c.T), false);
        for (std::int64_t k = uniform(0, 4); k > 0 && c.T > 1; --k)
          begins[uniform(1, c.T - 1)] = true;
        std::int64_t cur = 0;
        for (std::int64_t t = 0; t < c.T; ++t) {
          if (begins[t]) cur = t;
          starts[b * c.T + t] = cur;
        }
      }
    }
    std::ostringstream name;
    PrintTo(c, &name);
    if (!starts.empty()) name << " documents";
    SCOPED_TRACE("TANDEM_TEST_SEED=" + std::to_string(seed) + " problem " + std::to_string(n) +
                 ": " + name.str());
    for (const char* path : {"flash", ""}) {
      const testing::ScopedEnv choice("TANDEM_CUDA_ATTENTION", *path != 0 ? path : nullptr);
      SCOPED_TRACE(*path != 0 ? "tensor-core kernels" : "default path");
      REQUIRE_CUDA(gpu);
      const std::array<double, 5> d = check_within_cudnn_rounding(gpu, c, starts, seed * 100 + n);
      for (int i = 0; i < 5; ++i)
        worst[*path != 0 ? 0 : 1][i] = std::max(worst[*path != 0 ? 0 : 1][i], d[i]);
    }
  }
  // The largest distances (self-only problems' dq and dk aside, which are residue) for the JSON.
  const char* names[5] = {"_out", "_lse", "_dq", "_dk", "_dv"};
  for (int i = 0; i < 5; ++i) {
    ::testing::Test::RecordProperty(std::string("flash_worst") + names[i],
                                    std::to_string(worst[0][i]));
    ::testing::Test::RecordProperty(std::string("default_worst") + names[i],
                                    std::to_string(worst[1][i]));
  }
}

TEST(CudaBf16, SwigluAddEmbeddingAndRows) {
  REQUIRE_CUDA(gpu);
  const std::int64_t n = 1000;
  Quad g = quad(gpu, Shape{n}, bf16_values(n, 31, 3.0f)),
       u = quad(gpu, Shape{n}, bf16_values(n, 32));
  Quad h = quad_zeros(gpu, Shape{n});
  gpu.swiglu_forward(g.gf, u.gf, h.gf);
  gpu.swiglu_forward(g.gb, u.gb, h.gb);
  testing::cpu_backend().swiglu_forward(g.cb, u.cb, h.cb);
  expect_rounded(gpu, h, "swiglu h");
  expect_bf16_close(gpu, h, false, "swiglu h vs cpu");
  Quad dh = quad(gpu, Shape{n}, bf16_values(n, 33)), dg = quad_zeros(gpu, Shape{n});
  Quad du = quad_zeros(gpu, Shape{n});
  gpu.swiglu_backward(g.gf, u.gf, dh.gf, dg.gf, du.gf);
  gpu.swiglu_backward(g.gb, u.gb, dh.gb, dg.gb, du.gb);
  testing::cpu_backend().swiglu_backward(g.cb, u.cb, dh.cb, dg.cb, du.cb);
  expect_rounded(gpu, dg, "swiglu dg");
  expect_rounded(gpu, du, "swiglu du");
  expect_bf16_close(gpu, dg, false, "swiglu dg vs cpu");
  expect_bf16_close(gpu, du, false, "swiglu du vs cpu");

  Quad sum = quad_zeros(gpu, Shape{n});
  gpu.add(g.gf, u.gf, sum.gf);
  gpu.add(g.gb, u.gb, sum.gb);
  testing::cpu_backend().add(g.cb, u.cb, sum.cb);
  expect_rounded(gpu, sum, "add");
  expect_bf16_close(gpu, sum, true, "add vs cpu");

  const std::int64_t V = 50, d = 300, T = 400;
  std::vector<std::int64_t> ids(T);
  for (std::int64_t t = 0; t < T; ++t) ids[t] = (t * 7919 + t / 3) % V;  // many repeats
  Buffer id_g = put_i64(gpu, Shape{T}, ids), id_c = put_i64(testing::cpu_backend(), Shape{T}, ids);
  // An f32 table that is not bf16-representable: the bf16 lookup rounds it.
  const std::vector<float> table_values = normal(V * d, 34);
  Quad table = quad(gpu, Shape{V, d}, table_values), out = quad_zeros(gpu, Shape{T, d});
  gpu.embedding_forward(id_g, table.gf, out.gf);
  gpu.embedding_forward(id_g, table.gf, out.gb);  // f32 table -> bf16 rows (the model's lookup)
  testing::cpu_backend().embedding_forward(id_c, table.cf, out.cb);
  expect_rounded(gpu, out, "embedding from the f32 table");
  expect_bf16_close(gpu, out, true, "embedding from the f32 table vs cpu");
  Quad out16 = quad_zeros(gpu, Shape{T, d});
  gpu.embedding_forward(id_g, table.gb, out16.gb);  // bf16 table -> bf16 rows
  testing::cpu_backend().embedding_forward(id_c, table.cb, out16.cb);
  EXPECT_EQ(bits(gpu, out16.gb), bits(gpu, out.gb));
  expect_bf16_close(gpu, out16, true, "embedding from a bf16 table vs cpu");

  Quad dout = quad(gpu, Shape{T, d}, bf16_values(T * d, 35));
  Quad dtable = quad(gpu, Shape{V, d}, normal(V * d, 36));  // f32, accumulated into
  gpu.embedding_backward(id_g, dout.gb, dtable.gf);
  testing::cpu_backend().embedding_backward(id_c, dout.cb, dtable.cf);
  EXPECT_TRUE(bit_identical(get(gpu, dtable.gf), get(testing::cpu_backend(), dtable.cf)))
      << "rel L2 " << rel_l2(get(gpu, dtable.gf), get(testing::cpu_backend(), dtable.cf));

  Quad index = quad_i64(gpu, Shape{5}, {39, 0, 7, 7, 12}), rows = quad_zeros(gpu, Shape{5, d});
  gpu.gather_rows(out16.gb, index.gb, rows.gb);
  testing::cpu_backend().gather_rows(out16.cb, index.cb, rows.cb);
  expect_bf16_close(gpu, rows, true, "gather_rows vs cpu");
}

// The fused lm_head + cross-entropy: logits rounded to bf16 after the bf16 GEMM, the loss in
// fp32/double, the logits' gradient rounded to bf16 for the gradient GEMMs. Bounds of
// tests/kernels/bf16_test.cc (derived there) against the GPU's own fp32 result, and the triangle
// inequality through the fp32 results against the CPU's bf16 result.
TEST(CudaBf16, FusedCrossEntropyWithinItsRoundingBounds) {
  REQUIRE_CUDA(gpu);
  const std::int64_t N = 300, d = 64, V = 1000;
  std::vector<std::int64_t> labels(N);
  for (std::int64_t i = 0; i < N; ++i) labels[i] = i % 7 == 3 ? -100 : (i * 31 + 5) % V;
  for (std::int64_t i = 128; i < 192; ++i) labels[i] = -100;  // a whole chunk of 64 ignored
  Quad hidden = quad(gpu, Shape{N, d}, bf16_values(N * d, 41));
  Quad w = quad(gpu, Shape{V, d}, bf16_values(V * d, 42, 0.3f));
  Buffer lab_g = put_i64(gpu, Shape{N}, labels),
         lab_c = put_i64(testing::cpu_backend(), Shape{N}, labels);
  Buffer logits = put(testing::cpu_backend(), Shape{N, V}, std::vector<float>(N * V, 0.0f));
  testing::cpu_backend().linear_forward(hidden.cf, w.cf, logits);
  double max_logit = 0.0;
  for (float x : get(testing::cpu_backend(), logits))
    max_logit = std::max(max_logit, std::fabs(double{x}));
  ASSERT_GT(max_logit, 1.0);
  const float z = 1e-4f, gs = 1.0f / N;
  for (const char* chunk : {"64", ""}) {  // several chunks (one all-ignored), then the default
    const testing::ScopedEnv rows("TANDEM_CUDA_LOGITS_CHUNK_ROWS", *chunk ? chunk : nullptr);
    Quad dh = quad_zeros(gpu, Shape{N, d});
    Quad dw = quad_zeros(gpu, Shape{V, d});  // f32 for both precisions: use .gf/.cf and these
    Buffer dw_gb = put(gpu, Shape{V, d}, std::vector<float>(V * d, 0.0f));
    Buffer dw_cb = put(testing::cpu_backend(), Shape{V, d}, std::vector<float>(V * d, 0.0f));
    const auto gf = gpu.lm_head_cross_entropy(hidden.gf, w.gf, lab_g, z, gs, dh.gf, dw.gf);
    const auto gb = gpu.lm_head_cross_entropy(hidden.gb, w.gb, lab_g, z, gs, dh.gb, dw_gb);
    const auto cf =
        testing::cpu_backend().lm_head_cross_entropy(hidden.cf, w.cf, lab_c, z, gs, dh.cf, dw.cf);
    const auto cb =
        testing::cpu_backend().lm_head_cross_entropy(hidden.cb, w.cb, lab_c, z, gs, dh.cb, dw_cb);
    EXPECT_EQ(gb.count, cb.count);
    const double ce_bound = 2.0 * kBf16U * max_logit * gb.count;
    const double z_bound = 2.0 * kBf16U * max_logit * std::sqrt(gb.count * gf.z_sum) * 1.01;
    EXPECT_LE(std::fabs(gb.ce_sum - gf.ce_sum), ce_bound) << chunk;
    EXPECT_LE(std::fabs(gb.z_sum - gf.z_sum), z_bound) << chunk;
    const double fp32_ce = reduction_bound(d) * std::fabs(cf.ce_sum);
    const double fp32_z = reduction_bound(d) * std::fabs(cf.z_sum);
    EXPECT_LE(std::fabs(gb.ce_sum - cb.ce_sum), 2 * ce_bound + fp32_ce) << chunk;
    EXPECT_LE(std::fabs(gb.z_sum - cb.z_sum), 2 * z_bound + fp32_z) << chunk;
    const double grad_bound = kBf16U * (2.0 + max_logit);
    EXPECT_LE(gpu_vs_gpu(gpu, dh.gb, dh.gf), grad_bound + kBf16U) << chunk;
    EXPECT_LE(gpu_vs_gpu(gpu, dw_gb, dw.gf), grad_bound) << chunk;
    EXPECT_LE(gpu_vs_cpu(gpu, dh.gb, dh.cb), 2 * (grad_bound + kBf16U) + reduction_bound(V + d))
        << chunk;
    EXPECT_LE(gpu_vs_cpu(gpu, dw_gb, dw_cb), 2 * grad_bound + reduction_bound(N + d)) << chunk;
    // Loss only: no gradient outputs, the same sums.
    const auto lg = gpu.lm_head_cross_entropy(hidden.gb, w.gb, lab_g, z, gs, {}, {});
    EXPECT_EQ(lg.ce_sum, gb.ce_sum) << chunk;
  }
}

TEST(CudaBf16, TokenLogProbsOfBf16Logits) {
  REQUIRE_CUDA(gpu);
  const std::int64_t n = 20, V = 1000;
  Quad logits = quad(gpu, Shape{n, V}, bf16_values(n * V, 43, 3.0f));
  std::vector<std::int64_t> t(n);
  for (std::int64_t i = 0; i < n; ++i) t[i] = (i * 97) % V;
  Buffer tg = put_i64(gpu, Shape{n}, t), tc = put_i64(testing::cpu_backend(), Shape{n}, t);
  const auto a = testing::cpu_backend().token_log_probs(logits.cb, tc);
  const auto b = gpu.token_log_probs(logits.gb, tg);
  const auto f = gpu.token_log_probs(logits.gf, tg);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i], f[i]);  // the same values widened exactly: the same double arithmetic
    EXPECT_NEAR(b[i], a[i], 1e-12 * (1 + std::fabs(a[i])));
  }
}

// The bits of a bf16 attention forward and backward (window 50, with or without documents).
std::vector<std::uint16_t> attention_bits(Backend& gpu, bool documents) {
  const std::int64_t B = 2, T = 200, Hq = 4, Hkv = 2, D = 64;
  Buffer q = bf16_on(gpu, Shape{B, T, Hq, D}, bf16_values(B * T * Hq * D, 51));
  Buffer k = bf16_on(gpu, Shape{B, T, Hkv, D}, bf16_values(B * T * Hkv * D, 52));
  Buffer v = bf16_on(gpu, Shape{B, T, Hkv, D}, bf16_values(B * T * Hkv * D, 53));
  Buffer o = gpu.allocate(DType::bf16, Shape{B, T, Hq, D});
  Buffer lse = gpu.allocate(DType::f32, Shape{B, Hq, T});
  Buffer dq = gpu.allocate(DType::bf16, Shape{B, T, Hq, D});
  Buffer dk = gpu.allocate(DType::bf16, Shape{B, T, Hkv, D});
  Buffer dv = gpu.allocate(DType::bf16, Shape{B, T, Hkv, D});
  Buffer docs = put_i64(gpu, Shape{B * T}, two_documents_per_row(B, T));
  const Tensor doc = documents ? docs.tensor() : Tensor();
  gpu.attention_forward(q, k, v, o, lse, 50, 0.125f, doc);
  gpu.attention_backward(q, k, v, o, lse, o, dq, dk, dv, 50, 0.125f, doc);
  std::vector<std::uint16_t> all;
  for (const Buffer* b : {&o, &dq, &dk, &dv}) {
    const auto x = bits(gpu, *b);
    all.insert(all.end(), x.begin(), x.end());
  }
  const std::vector<float> l = get(gpu, lse);
  for (float x : l) {  // all 32 bits of each f32 statistic
    const std::uint32_t b = std::bit_cast<std::uint32_t>(x);
    all.push_back(static_cast<std::uint16_t>(b >> 16));
    all.push_back(static_cast<std::uint16_t>(b & 0xFFFFu));
  }
  return all;
}

TEST(CudaBf16, OpsAreDeterministic) {
  REQUIRE_CUDA(gpu);
  auto run = [&] {
    std::pair<std::vector<std::uint16_t>, std::vector<float>> result;
    std::vector<std::uint16_t>& all = result.first;
    const std::int64_t N = 400, d = 128, V = 3001;
    all = attention_bits(gpu, false);
    Buffer x = bf16_on(gpu, Shape{N, d}, bf16_values(N * d, 54));
    Buffer w = bf16_on(gpu, Shape{V, d}, bf16_values(V * d, 55, 0.1f));
    std::vector<std::int64_t> labels(N);
    for (std::int64_t i = 0; i < N; ++i) labels[i] = i % 5 ? (i * 31) % V : -100;
    Buffer lab = put_i64(gpu, Shape{N}, labels);
    Buffer dh = gpu.allocate(DType::bf16, Shape{N, d});
    Buffer dw = put(gpu, Shape{V, d}, std::vector<float>(V * d, 0.0f));
    const auto s = gpu.lm_head_cross_entropy(x, w, lab, 1e-4f, 1.0f / N, dh, dw);
    const auto hb = bits(gpu, dh);
    all.insert(all.end(), hb.begin(), hb.end());
    result.second = get(gpu, dw);
    result.second.push_back(static_cast<float>(s.ce_sum));
    result.second.push_back(static_cast<float>(s.z_sum));
    return result;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a.first, b.first);
  EXPECT_TRUE(bit_identical(a.second, b.second));
}

TEST(CudaBf16, AnUnknownAttentionChoiceIsRefused) {
  REQUIRE_GPU();
  const testing::ScopedEnv typo("TANDEM_CUDA_ATTENTION", "cudnn");
  try {
    kernels::make_backend("cuda");
    ADD_FAILURE() << "TANDEM_CUDA_ATTENTION=cudnn was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected plain or flash"), std::string::npos) << e.what();
  }
}

// The tensor-core attention kernels (the default path wherever cuDNN is not) repeat bit for bit,
// with and without documents.
TEST(CudaBf16, TensorCoreAttentionIsDeterministic) {
  const testing::ScopedEnv flash("TANDEM_CUDA_ATTENTION", "flash");
  REQUIRE_CUDA(gpu);
  for (bool documents : {false, true})
    EXPECT_EQ(attention_bits(gpu, documents), attention_bits(gpu, documents)) << documents;
}

}  // namespace
}  // namespace tandem::cuda_testing
