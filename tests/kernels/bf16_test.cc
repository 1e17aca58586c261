// The bf16 half of the precision policy on the CPU backend (docs/precision.md).
// 1. fp32 -> bf16 rounding gives torch's bits (fixture from tools/make_bf16_model_fixtures.py:
//    ties both ways, subnormals, infinities, NaNs, overflow to infinity, random patterns).
// 2. Each op's bf16 variant against its fp32 variant fed the same bf16-rounded inputs. Ops that
//    compute in fp32 on exactly widened inputs and round each output once must give exactly
//    bf16(fp32 result): compared bit for bit. GEMMs (oneDNN's bf16 matmul or the exact fallback)
//    accumulate in another order, so their bound is one bf16 rounding, the unit roundoff
//    u = 2^-8 of an 8-bit significand, plus 1e-5 for fp32 reordering, as a relative L2 error. The
//    fused cross-entropy also rounds the logits and their gradient to bf16 (as HF's bf16 lm_head
//    does): its bounds are derived next to the test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../support/test_support.h"
#include "kernel_test_util.h"
#include "tandem/io/npy.h"
#include "tandem/kernels/backend.h"
#include "tandem/kernels/cpu/bf16.h"

namespace tandem::kernels {
namespace {

constexpr double kUnitRoundoff = 1.0 / 256.0;  // bf16: 8 significant bits

Backend& be() { return tandem::testing::cpu_backend(); }

// A pair of tensors holding the same bf16-representable values: f32 and bf16.
struct Pair {
  Buffer f, b;
};

Pair make_pair(Shape shape, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v =
      cpu::testing::random_floats(static_cast<std::size_t>(shape.numel()), seed, scale);
  cpu::round_to_bf16(v.data(), static_cast<std::int64_t>(v.size()));
  Pair p{be().allocate(DType::f32, shape), be().allocate(DType::bf16, shape)};
  be().upload(p.f, v.data());
  be().cast(p.b, p.f);
  return p;
}

Pair make_outputs(Shape shape) {
  Pair p{be().allocate(DType::f32, shape), be().allocate(DType::bf16, shape)};
  be().zero(p.f);
  be().zero(p.b);
  return p;
}

std::vector<float> host(const Tensor& t) {
  if (t.dtype() == DType::f32) return to_host_f32(be(), t);
  Buffer wide = be().allocate(DType::f32, t.shape());
  be().cast(wide, t);
  return to_host_f32(be(), wide);
}

// The bf16 result equals the fp32 result rounded to bf16, bit for bit.
void expect_rounded_equal(const Pair& p, const char* what) {
  std::vector<float> f = host(p.f), b = host(p.b);
  ASSERT_EQ(f.size(), b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < f.size(); ++i)
    if (cpu::f32_to_bf16(f[i]) != cpu::f32_to_bf16(b[i]) ||
        b[i] != cpu::bf16_to_f32(cpu::f32_to_bf16(f[i])))
      ++bad;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << f.size() << " values differ";
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0.0, n = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]) - ref[i];
    d += x * x;
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

TEST(Bf16, RoundingGivesTorchsBits) {
  const std::string dir = tandem::testing::fixture("model/bf16_rounding");
  io::NpyArray in = io::read_npy(dir + "/f32_bits.npy");
  io::NpyArray out = io::read_npy(dir + "/bf16_bits.npy");
  const std::vector<std::int64_t> in_bits = in.as_i64(), out_bits = out.as_i64();
  ASSERT_EQ(in_bits.size(), out_bits.size());
  ASSERT_GT(in_bits.size(), 4000u);
  std::vector<float> values(in_bits.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in_bits[i]));
  std::vector<cpu::bf16> ours(values.size());
  cpu::to_bf16(values.data(), ours.data(), static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(ours[i], static_cast<cpu::bf16>(out_bits[i]))
        << "input bits 0x" << std::hex << static_cast<std::uint32_t>(in_bits[i]);
  // Widening is exact: bf16 -> f32 -> bf16 is the identity on every non-NaN pattern.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = cpu::bf16_to_f32(static_cast<cpu::bf16>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(cpu::f32_to_bf16(f), b);
    }
  }
}

TEST(Bf16, CastOpRoundsAndWidens) {
  Pair p = make_pair(Shape{1000}, 1, 3.0f);
  std::vector<float> f = host(p.f);
  std::vector<float> b = host(p.b);
  EXPECT_EQ(f, b);  // the values were bf16-representable: the round trip is exact
  std::vector<float> odd = {1.00390625f, 1.01171875f, -3.4e38f, 1e-41f};
  Buffer src = be().allocate(DType::f32, Shape{4}), dst = be().allocate(DType::bf16, Shape{4});
  be().upload(src, odd.data());
  be().cast(dst, src);
  std::vector<cpu::bf16> bits(4);
  be().download(bits.data(), dst);
  EXPECT_EQ(bits[0], 0x3F80);  // tie to even: down
  EXPECT_EQ(bits[1], 0x3F82);  // tie to even: up
  EXPECT_EQ(bits[2], 0xFF80);  // overflow to -inf
  EXPECT_EQ(bits[3], 0x0000);  // 1e-41 is below half of 9.2e-41, the smallest bf16 subnormal
}

TEST(Bf16, LinearForwardAndBackwardWithinOneRounding) {
  const std::int64_t T = 37, in_w = 96, out_w = 53;
  Pair x = make_pair(Shape{T, in_w}, 2), w = make_pair(Shape{out_w, in_w}, 3, 0.2f);
  Pair y = make_outputs(Shape{T, out_w});
  be().linear_forward(x.f, w.f, y.f);
  be().linear_forward(x.b, w.b, y.b);
  const double bound = kUnitRoundoff + 1e-5;
  EXPECT_LE(rel_l2(host(y.b), host(y.f)), bound);

  Pair dy = make_pair(Shape{T, out_w}, 4);
  for (bool accumulate : {false, true}) {
    Pair dx = make_pair(Shape{T, in_w}, 5);  // the accumulated-into values, bf16-representable
    Buffer dw_f = be().allocate(DType::f32, Shape{out_w, in_w});
    Buffer dw_b = be().allocate(DType::f32, Shape{out_w, in_w});
    be().zero(dw_f);
    be().zero(dw_b);
    be().linear_backward(x.f, w.f, dy.f, dx.f, dw_f, accumulate);
    be().linear_backward(x.b, w.b, dy.b, dx.b, dw_b, accumulate);
    EXPECT_LE(rel_l2(host(dx.b), host(dx.f)), bound) << "accumulate " << accumulate;
    // Weight gradients stay f32: only the summation order may differ.
    EXPECT_LE(rel_l2(host(dw_b), host(dw_f)), 1e-5) << "accumulate " << accumulate;
  }
}

TEST(Bf16, RmsNormIsTheRoundedFp32Result) {
  const std::int64_t rows = 23, d = 80;
  Pair x = make_pair(Shape{rows, d}, 6, 2.0f), w = make_pair(Shape{d}, 7);
  Pair y = make_outputs(Shape{rows, d});
  Buffer rstd_f = be().allocate(DType::f32, Shape{rows}),
         rstd_b = be().allocate(DType::f32, Shape{rows});
  be().rmsnorm_forward(x.f, w.f, y.f, rstd_f, 1e-6f);
  be().rmsnorm_forward(x.b, w.b, y.b, rstd_b, 1e-6f);
  expect_rounded_equal(y, "rmsnorm y");
  EXPECT_EQ(host(rstd_b), host(rstd_f));  // statistics in fp32 from the same values

  Pair dy = make_pair(Shape{rows, d}, 8), dx = make_outputs(Shape{rows, d});
  Buffer dw_f = be().allocate(DType::f32, Shape{d}), dw_b = be().allocate(DType::f32, Shape{d});
  be().zero(dw_f);
  be().zero(dw_b);
  be().rmsnorm_backward(x.f, w.f, rstd_f, dy.f, dx.f, dw_f);
  be().rmsnorm_backward(x.b, w.b, rstd_b, dy.b, dx.b, dw_b);
  expect_rounded_equal(dx, "rmsnorm dx");
  EXPECT_EQ(host(dw_b), host(dw_f));
}

TEST(Bf16, RopeIsTheRoundedFp32Result) {
  const std::int64_t B = 2, T = 9, H = 3, D = 8;
  std::vector<float> cos(T * D / 2), sin(T * D / 2);
  for (std::size_t i = 0; i < cos.size(); ++i) {
    cos[i] = std::cos(0.37f * static_cast<float>(i));
    sin[i] = std::sin(0.37f * static_cast<float>(i));
  }
  Buffer c = be().allocate(DType::f32, Shape{T, D / 2}),
         s = be().allocate(DType::f32, Shape{T, D / 2});
  be().upload(c, cos.data());
  be().upload(s, sin.data());
  Pair x = make_pair(Shape{B, T, H, D}, 9);
  be().rope_forward(x.f, c, s);
  be().rope_forward(x.b, c, s);
  expect_rounded_equal(x, "rope forward");
  Pair dx = make_pair(Shape{B, T, H, D}, 10);
  be().rope_backward(dx.f, c, s);
  be().rope_backward(dx.b, c, s);
  expect_rounded_equal(dx, "rope backward");
}

TEST(Bf16, AttentionIsTheRoundedFp32Result) {
  const std::int64_t B = 2, T = 13, Hq = 4, Hkv = 2, D = 8;
  for (std::int64_t window : {0, 5}) {
    Pair q = make_pair(Shape{B, T, Hq, D}, 11), k = make_pair(Shape{B, T, Hkv, D}, 12);
    Pair v = make_pair(Shape{B, T, Hkv, D}, 13), o = make_outputs(Shape{B, T, Hq, D});
    Buffer lse_f = be().allocate(DType::f32, Shape{B, Hq, T});
    Buffer lse_b = be().allocate(DType::f32, Shape{B, Hq, T});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    be().attention_forward(q.f, k.f, v.f, o.f, lse_f, window, scale);
    be().attention_forward(q.b, k.b, v.b, o.b, lse_b, window, scale);
    expect_rounded_equal(o, "attention out");
    EXPECT_EQ(host(lse_b), host(lse_f));
    // The backward reads the saved output: feed both the same bf16-rounded output.
    be().cast(o.f, o.b);
    Pair dout = make_pair(Shape{B, T, Hq, D}, 14);
    Pair dq = make_outputs(Shape{B, T, Hq, D}), dk = make_outputs(Shape{B, T, Hkv, D});
    Pair dv = make_outputs(Shape{B, T, Hkv, D});
    be().attention_backward(q.f, k.f, v.f, o.f, lse_f, dout.f, dq.f, dk.f, dv.f, window, scale);
    be().attention_backward(q.b, k.b, v.b, o.b, lse_b, dout.b, dq.b, dk.b, dv.b, window, scale);
    expect_rounded_equal(dq, "attention dq");
    expect_rounded_equal(dk, "attention dk");
    expect_rounded_equal(dv, "attention dv");
  }
}

TEST(Bf16, SwigluAddEmbeddingAndRowsAreTheRoundedFp32Result) {
  const std::int64_t n = 301;
  Pair g = make_pair(Shape{n}, 15, 2.0f), u = make_pair(Shape{n}, 16), h = make_outputs(Shape{n});
  be().swiglu_forward(g.f, u.f, h.f);
  be().swiglu_forward(g.b, u.b, h.b);
  expect_rounded_equal(h, "swiglu h");
  Pair dh = make_pair(Shape{n}, 17), dg = make_outputs(Shape{n}), du = make_outputs(Shape{n});
  be().swiglu_backward(g.f, u.f, dh.f, dg.f, du.f);
  be().swiglu_backward(g.b, u.b, dh.b, dg.b, du.b);
  expect_rounded_equal(dg, "swiglu dg");
  expect_rounded_equal(du, "swiglu du");

  Pair sum = make_outputs(Shape{n});
  be().add(g.f, u.f, sum.f);
  be().add(g.b, u.b, sum.b);
  expect_rounded_equal(sum, "add");

  const std::int64_t V = 11, d = 6;
  std::vector<std::int64_t> ids = {3, 0, 10, 3, 7};
  Buffer id = be().allocate(DType::i64, Shape{5});
  be().upload(id, ids.data());
  Pair table = make_pair(Shape{V, d}, 18), out = make_outputs(Shape{5, d});
  be().embedding_forward(id, table.f, out.f);
  be().embedding_forward(id, table.b, out.b);
  expect_rounded_equal(out, "embedding");
  // A bf16 output read from the f32 table: the same bits as the bf16 table's lookup.
  Buffer from_f32 = be().allocate(DType::bf16, Shape{5, d});
  be().embedding_forward(id, table.f, from_f32);
  EXPECT_EQ(host(from_f32), host(out.b));
  Pair dout = make_pair(Shape{5, d}, 19);
  Buffer dt_f = be().allocate(DType::f32, Shape{V, d}),
         dt_b = be().allocate(DType::f32, Shape{V, d});
  be().zero(dt_f);
  be().zero(dt_b);
  be().embedding_backward(id, dout.f, dt_f);
  be().embedding_backward(id, dout.b, dt_b);
  EXPECT_EQ(host(dt_b), host(dt_f));  // f32 accumulation of the same values in the same order
  Pair rows = make_outputs(Shape{5, d});
  be().gather_rows(table.f, id, rows.f);
  be().gather_rows(table.b, id, rows.b);
  expect_rounded_equal(rows, "gather_rows");
}

// Micro-batches large enough that the backend widens bf16 operands block by block (rows, batch
// rows or elements): still exactly bf16(fp32 result), and GEMMs within one rounding.
TEST(Bf16, BlockedLargeOpsMatchTheFp32Result) {
  const std::int64_t B = 3, T = 192, H = 8, D = 64, N = B * T, hid = 1400;
  Pair g = make_pair(Shape{N, hid}, 30), u = make_pair(Shape{N, hid}, 31);
  Pair h = make_outputs(Shape{N, hid});
  ASSERT_GT(g.b.numel(), 1 << 18);
  be().swiglu_forward(g.f, u.f, h.f);
  be().swiglu_forward(g.b, u.b, h.b);
  expect_rounded_equal(h, "swiglu (blocked)");
  Pair sum = make_outputs(Shape{N, hid});
  be().add(g.f, u.f, sum.f);
  be().add(g.b, u.b, sum.b);
  expect_rounded_equal(sum, "add (blocked)");

  Pair x = make_pair(Shape{N, H * D}, 32), w = make_pair(Shape{H * D}, 33);
  Pair y = make_outputs(Shape{N, H * D});
  Buffer rf = be().allocate(DType::f32, Shape{N}), rb = be().allocate(DType::f32, Shape{N});
  be().rmsnorm_forward(x.f, w.f, y.f, rf, 1e-6f);
  be().rmsnorm_forward(x.b, w.b, y.b, rb, 1e-6f);
  expect_rounded_equal(y, "rmsnorm (blocked)");
  EXPECT_EQ(host(rb), host(rf));

  const Shape s4{B, T, H, D};
  Pair q = make_pair(s4, 34), k = make_pair(s4, 35), v = make_pair(s4, 36), o = make_outputs(s4);
  ASSERT_GT(q.b.numel(), 1 << 18);
  Buffer lf = be().allocate(DType::f32, Shape{B, H, T}),
         lb = be().allocate(DType::f32, Shape{B, H, T});
  const float scale = 0.125f;
  std::vector<std::int64_t> docs(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) docs[i] = (i % T) < 70 ? 0 : 70;  // two documents per row
  Buffer doc = be().allocate(DType::i64, Shape{N});
  be().upload(doc, docs.data());
  be().attention_forward(q.f, k.f, v.f, o.f, lf, 48, scale, doc);
  be().attention_forward(q.b, k.b, v.b, o.b, lb, 48, scale, doc);
  expect_rounded_equal(o, "attention (blocked)");
  EXPECT_EQ(host(lb), host(lf));
  be().cast(o.f, o.b);
  Pair dout = make_pair(s4, 37), dq = make_outputs(s4), dk = make_outputs(s4),
       dv = make_outputs(s4);
  be().attention_backward(q.f, k.f, v.f, o.f, lf, dout.f, dq.f, dk.f, dv.f, 48, scale, doc);
  be().attention_backward(q.b, k.b, v.b, o.b, lb, dout.b, dq.b, dk.b, dv.b, 48, scale, doc);
  expect_rounded_equal(dq, "attention dq (blocked)");
  expect_rounded_equal(dk, "attention dk (blocked)");
  expect_rounded_equal(dv, "attention dv (blocked)");

  std::vector<float> cos(T * D / 2), sin(T * D / 2);
  for (std::size_t i = 0; i < cos.size(); ++i) {
    cos[i] = std::cos(0.01f * static_cast<float>(i));
    sin[i] = std::sin(0.01f * static_cast<float>(i));
  }
  Buffer c = be().allocate(DType::f32, Shape{T, D / 2}),
         sn = be().allocate(DType::f32, Shape{T, D / 2});
  be().upload(c, cos.data());
  be().upload(sn, sin.data());
  std::vector<std::int64_t> pos(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) pos[i] = (i * 7) % T;
  Buffer p = be().allocate(DType::i64, Shape{N});
  be().upload(p, pos.data());
  be().rope_forward(q.f, c, sn, p);
  be().rope_forward(q.b, c, sn, p);
  expect_rounded_equal(q, "rope (blocked)");

  const std::int64_t rows = 2500, in_w = 64, out_w = 96;
  Pair lx = make_pair(Shape{rows, in_w}, 38), lw = make_pair(Shape{out_w, in_w}, 39, 0.2f);
  Pair ly = make_outputs(Shape{rows, out_w});
  be().linear_forward(lx.f, lw.f, ly.f);
  be().linear_forward(lx.b, lw.b, ly.b);
  EXPECT_LE(rel_l2(host(ly.b), host(ly.f)), kUnitRoundoff + 1e-5);
  Pair ldy = make_pair(Shape{rows, out_w}, 40), ldx = make_outputs(Shape{rows, in_w});
  Buffer dwf = be().allocate(DType::f32, Shape{out_w, in_w}),
         dwb = be().allocate(DType::f32, Shape{out_w, in_w});
  be().zero(dwf);
  be().zero(dwb);
  be().linear_backward(lx.f, lw.f, ldy.f, ldx.f, dwf, false);
  be().linear_backward(lx.b, lw.b, ldy.b, ldx.b, dwb, false);
  EXPECT_LE(rel_l2(host(ldx.b), host(ldx.f)), kUnitRoundoff + 1e-5);
  EXPECT_LE(rel_l2(host(dwb), host(dwf)), 1e-5);
}

TEST(Bf16, FusedCrossEntropyWithinItsRoundingBounds) {
  const std::int64_t N = 29, d = 48, V = 203;
  Pair hidden = make_pair(Shape{N, d}, 20), w = make_pair(Shape{V, d}, 21, 0.3f);
  std::vector<std::int64_t> labels(N);
  for (std::int64_t i = 0; i < N; ++i) labels[i] = (i * 37) % V;
  labels[4] = -100;  // ignored
  Buffer lab = be().allocate(DType::i64, Shape{N});
  be().upload(lab, labels.data());
  Pair dh = make_outputs(Shape{N, d});
  Buffer dw_f = be().allocate(DType::f32, Shape{V, d}),
         dw_b = be().allocate(DType::f32, Shape{V, d});
  be().zero(dw_f);
  be().zero(dw_b);
  const float z = 1e-4f, gs = 1.0f / 28.0f;
  LossSums f = be().lm_head_cross_entropy(hidden.f, w.f, lab, z, gs, dh.f, dw_f);
  LossSums b = be().lm_head_cross_entropy(hidden.b, w.b, lab, z, gs, dh.b, dw_b);
  EXPECT_EQ(b.count, f.count);
  // The largest logit bounds each logit's rounding error: |delta| <= u * max|logit|. The CE of a
  // token moves by at most its lse's and its label logit's shifts: 2 u max|logit| per token.
  Buffer logits = be().allocate(DType::f32, Shape{N, V});
  be().linear_forward(hidden.f, w.f, logits);
  double max_logit = 0.0;
  for (float x : host(logits)) max_logit = std::max(max_logit, static_cast<double>(std::abs(x)));
  ASSERT_GT(max_logit, 1.0);
  EXPECT_LE(std::abs(b.ce_sum - f.ce_sum), 2.0 * kUnitRoundoff * max_logit * f.count);
  // z = lse^2 moves by 2 |lse| |delta lse|; summed, by Cauchy-Schwarz at most
  // 2 u max|logit| sqrt(count * z_sum).
  EXPECT_LE(
      std::abs(b.z_sum - f.z_sum),
      2.0 * kUnitRoundoff * max_logit * std::sqrt(static_cast<double>(f.count) * f.z_sum) * 1.01);
  // Gradients: dlogits = softmax - onehot moves by p * (u max|logit|) through the rounded logits
  // and by u through its own rounding; dhidden adds one more output rounding.
  const double grad_bound = kUnitRoundoff * (2.0 + max_logit);
  EXPECT_LE(rel_l2(host(dh.b), host(dh.f)), grad_bound + kUnitRoundoff);
  EXPECT_LE(rel_l2(host(dw_b), host(dw_f)), grad_bound);
}

}  // namespace
}  // namespace tandem::kernels
