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
#include <string>
#include <tuple>
#include <utility>

#include "../support/test_support.h"
#include "bf16_test_util.h"
#include "cuda_test_util.h"
#include "tandem/core/bfloat16.h"

namespace tandem::cuda_testing {
namespace {

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

// The bandwidth-bound kernels take 16-byte accesses, 8 elements at a time, where every operand is
// 16-byte aligned (and, for the row kernels, each row a whole number of packs), and go element by
// element where one is not (packed_access.cuh). The same values through both, in both precisions,
// give the same bits: add, SwiGLU and the casts with a tail past the last whole pack (n = 8 k + 3);
// AdamW (fp32 only) likewise; RMSNorm forward and backward over rows of 2,056 columns (257 packs:
// one thread of the 256 takes two), whose row sums keep their order either way; RoPE with 16
// pairs per half row (two packs).
TEST(CudaBf16, PackedAndElementwiseAccessesGiveTheSameBits) {
  REQUIRE_CUDA(gpu);
  const std::int64_t n = 1003;
  const std::int64_t rows = 3, d = 2056;                  // RMSNorm
  const std::int64_t B = 1, T = 5, H = 2, D = 32, P = 7;  // RoPE
  std::vector<float> cos(P * D / 2), sin(P * D / 2);
  for (std::size_t i = 0; i < cos.size(); ++i) {
    cos[i] = std::cos(0.37f * static_cast<float>(i));
    sin[i] = std::sin(0.37f * static_cast<float>(i));
  }
  Buffer cos_g = put(gpu, Shape{P, D / 2}, cos), sin_g = put(gpu, Shape{P, D / 2}, sin);
  // The ops' outputs for inputs placed `offset` elements into their buffers (offset 1 misaligns
  // every operand of either type).
  const auto outputs = [&](DType t, std::int64_t offset) {
    std::vector<Buffer> owned;
    const auto operand_of = [&](DType type, Shape shape, const std::vector<float>& v) {
      owned.push_back(gpu.allocate(type, Shape{shape.numel() + 1}));
      const Tensor view = owned.back().tensor().view(offset, shape);
      if (type == DType::f32) {
        gpu.upload(view, v.data());
      } else {
        std::vector<std::uint16_t> b(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) b[i] = to_bits(v[i]);
        gpu.upload(view, b.data());
      }
      return view;
    };
    const auto operand = [&](const std::vector<float>& v) {
      return operand_of(t, Shape{static_cast<std::int64_t>(v.size())}, v);
    };
    const std::vector<float> none(n, 0.0f);
    const Tensor g = operand(bf16_values(n, 61, 3.0f)), u = operand(bf16_values(n, 62));
    const Tensor dh = operand(bf16_values(n, 63)), h = operand(none);
    const Tensor dg = operand(none), du = operand(none), sum = operand(none);
    gpu.swiglu_forward(g, u, h);
    gpu.swiglu_backward(g, u, dh, dg, du);
    gpu.add(g, u, sum);
    std::vector<std::pair<std::string, std::vector<float>>> out = {{"swiglu h", values(gpu, h)},
                                                                   {"swiglu dg", values(gpu, dg)},
                                                                   {"swiglu du", values(gpu, du)},
                                                                   {"add", values(gpu, sum)}};
    // The casts, from f32 to bf16 (rounding values that are not bf16) and back.
    const Tensor wide = operand_of(DType::f32, Shape{n}, normal(n, 64));
    const Tensor narrow = operand_of(DType::bf16, Shape{n}, none);
    gpu.cast(narrow, wide);
    gpu.cast(wide, narrow);
    out.emplace_back("casts", values(gpu, wide));
    // RMSNorm: y and rstd, then dx and the accumulated dw.
    const Tensor x = operand_of(t, Shape{rows, d}, bf16_values(rows * d, 65, 2.0f));
    const Tensor w = operand_of(t, Shape{d}, bf16_values(d, 66));
    const Tensor y = operand_of(t, Shape{rows, d}, std::vector<float>(rows * d, 0.0f));
    const Tensor rstd = operand_of(DType::f32, Shape{rows}, std::vector<float>(rows, 0.0f));
    gpu.rmsnorm_forward(x, w, y, rstd, 1e-6f);
    const Tensor dy = operand_of(t, Shape{rows, d}, bf16_values(rows * d, 67));
    const Tensor dx = operand_of(t, Shape{rows, d}, std::vector<float>(rows * d, 0.0f));
    const Tensor dw = operand_of(DType::f32, Shape{d}, bf16_values(d, 68));
    gpu.rmsnorm_backward(x, w, rstd, dy, dx, dw);
    out.emplace_back("rmsnorm y", values(gpu, y));
    out.emplace_back("rmsnorm rstd", values(gpu, rstd));
    out.emplace_back("rmsnorm dx", values(gpu, dx));
    out.emplace_back("rmsnorm dw", values(gpu, dw));
    // RoPE forward then backward, in place.
    const Tensor q = operand_of(t, Shape{B, T, H, D}, bf16_values(B * T * H * D, 69));
    gpu.rope_forward(q, cos_g, sin_g, Tensor());
    out.emplace_back("rope forward", values(gpu, q));
    gpu.rope_backward(q, cos_g, sin_g, Tensor());
    out.emplace_back("rope backward", values(gpu, q));
    // AdamW (fp32 master weights and moments only).
    if (t == DType::f32) {
      std::vector<float> v0 = normal(n, 73);
      for (float& e : v0) e = e * e * 1e-4f;
      const Tensor p = operand(normal(n, 70)), grad = operand(normal(n, 71, 0.01f));
      const Tensor m = operand(normal(n, 72, 0.001f)), v = operand(v0);
      gpu.adamw_update(p, grad, m, v, testing::adamw_scalars(1, true));
      out.emplace_back("adamw p", values(gpu, p));
      out.emplace_back("adamw m", values(gpu, m));
      out.emplace_back("adamw v", values(gpu, v));
    }
    return out;
  };
  for (DType t : {DType::f32, DType::bf16}) {
    const auto packed = outputs(t, 0), elementwise = outputs(t, 1);
    ASSERT_EQ(packed.size(), elementwise.size());
    for (std::size_t k = 0; k < packed.size(); ++k)
      EXPECT_TRUE(bit_identical(packed[k].second, elementwise[k].second))
          << packed[k].first << (t == DType::f32 ? " (f32)" : " (bf16)");
  }
}

// The cross-entropy rows (the logits chunk is the backend's own, always aligned, so the switch
// TANDEM_CUDA_PACKED_ACCESS=0 takes the element-wise path): the same losses and gradients, bit for
// bit, in both precisions, with some rows ignored.
TEST(CudaBf16, CrossEntropyRowsGiveTheSameBitsPackedOrNot) {
  REQUIRE_CUDA(gpu);
  const std::int64_t N = 70, d = 32, V = 2056;  // V = 257 packs: 512 threads, some with none
  std::vector<std::int64_t> labels(N);
  for (std::int64_t i = 0; i < N; ++i) labels[i] = i % 9 == 4 ? -100 : (i * 37 + 11) % V;
  Quad hidden = quad(gpu, Shape{N, d}, bf16_values(N * d, 74));
  Quad w = quad(gpu, Shape{V, d}, bf16_values(V * d, 75, 0.5f));
  Quad label = quad_i64(gpu, Shape{N}, labels);
  for (bool bf16 : {false, true}) {
    const Tensor h = bf16 ? hidden.gb.tensor() : hidden.gf.tensor();
    const Tensor wt = bf16 ? w.gb.tensor() : w.gf.tensor();
    const auto run = [&](const char* packed) {
      const testing::ScopedEnv env("TANDEM_CUDA_PACKED_ACCESS", packed);
      Buffer dh = gpu.allocate(h.dtype(), Shape{N, d});
      Buffer dw = put(gpu, Shape{V, d}, std::vector<float>(V * d, 0.0f));
      const auto r = gpu.lm_head_cross_entropy(h, wt, label.gf, 1e-4f, 1.0f / N, dh, dw);
      return std::make_tuple(r.ce_sum, r.z_sum, values(gpu, dh), values(gpu, dw));
    };
    const auto [ce_p, z_p, dh_p, dw_p] = run(nullptr);
    const auto [ce_e, z_e, dh_e, dw_e] = run("0");
    const char* which = bf16 ? " (bf16)" : " (f32)";
    EXPECT_EQ(ce_p, ce_e) << which;
    EXPECT_EQ(z_p, z_e) << which;
    EXPECT_TRUE(bit_identical(dh_p, dh_e)) << "dhidden" << which;
    EXPECT_TRUE(bit_identical(dw_p, dw_e)) << "dw" << which;
  }
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

}  // namespace
}  // namespace tandem::cuda_testing
