// bf16 attention on the CUDA backend, every path against the CPU backend's bf16 op: the plain
// kernels (the rounded fp32 result, bit for bit), the default path (cuDNN's fused SDPA on the
// device) and tandem's tensor-core kernels (within cuDNN's rounding), on fixed shapes and on
// random problems; the path choice and the tensor-core kernels' determinism. The bounds are those
// of bf16_ops_test.cc's header. Without a GPU every test skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/test_support.h"
#include "bf16_test_util.h"
#include "cuda_test_util.h"

namespace tandem::cuda_testing {
namespace {

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

// Where every query sees only itself, the bf16 dq and dk of both backends against the residue
// bound of inputs q, k, v and dout (cuda_test_util.h).
void expect_bf16_self_only_residue(kernels::Backend& gpu, const Bf16AttentionCase& c, float scale,
                                   const Quad& q, const Quad& k, const Quad& v, const Quad& dout,
                                   const Quad& dq, const Quad& dk) {
  const double residue = self_only_residue_bound(
      scale, c.D, c.Hq / c.Hkv, max_abs(values(gpu, dout.gb)), max_abs(values(gpu, v.gb)),
      std::max(max_abs(values(gpu, q.gb)), max_abs(values(gpu, k.gb))));
  expect_self_only_residue(residue, values(gpu, dq.gb), values(gpu, dk.gb),
                           values(testing::cpu_backend(), dq.cb),
                           values(testing::cpu_backend(), dk.cb));
}

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
  expect_bf16_close(gpu, dv, false, "attention dv vs cpu", terms);
  if (!every_query_sees_only_itself(c.B, c.T, c.window,
                                    c.documents ? docs : std::vector<std::int64_t>{})) {
    expect_bf16_close(gpu, dq, false, "attention dq vs cpu", terms);
    expect_bf16_close(gpu, dk, false, "attention dk vs cpu", terms);
    return;
  }
  // dq and dk are residue here (cuda_test_util.h): checked against its bound on both sides.
  expect_bf16_self_only_residue(gpu, c, scale, q, k, v, dout, dq, dk);
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
  if (!every_query_sees_only_itself(c.B, c.T, c.window, doc_starts)) {
    EXPECT_LE(distances[2], bwd) << "attention dq";
    EXPECT_LE(distances[3], bwd) << "attention dk";
    return distances;
  }
  // dq and dk are residue here (cuda_test_util.h): checked against its bound on both sides.
  expect_bf16_self_only_residue(gpu, c, scale, q, k, v, dout, dq, dk);
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
                      Bf16AttentionCase{1, 70, 4, 2, 64, 1, false},     // each query sees itself
                      Bf16AttentionCase{1, 65, 2, 1, 16, 64, false},    // window one short of T
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

// The tensor-core kernels skip the mask on blocks of keys (64 in the forward, 16 in the
// backward) that every query of a warp (16 rows) sees, and on blocks of 16 queries that all see a
// warp's keys. Here the edges of what is seen fall at every offset to those blocks: windows of 30
// to 45 keys and of 79 to 94 (every residue mod 16, past one warp's rows and past a warp's rows
// and a forward tile), and a second document starting at each of 16 consecutive positions, past
// the first warp of a 64-row block.
TEST(CudaBf16, TensorCoreMasksAtEveryAlignment) {
  const testing::ScopedEnv flash("TANDEM_CUDA_ATTENTION", "flash");
  REQUIRE_CUDA(gpu);
  constexpr std::int64_t T = 256;
  for (std::int64_t first : {30, 79})
    for (std::int64_t window = first; window < first + 16; ++window) {
      SCOPED_TRACE("window " + std::to_string(window));
      check_within_cudnn_rounding(gpu, Bf16AttentionCase{1, T, 2, 1, 16, window, false}, {});
    }
  for (std::int64_t start = 81; start < 97; ++start) {
    SCOPED_TRACE("second document from " + std::to_string(start));
    std::vector<std::int64_t> docs(static_cast<std::size_t>(T));
    for (std::int64_t i = 0; i < T; ++i) docs[static_cast<std::size_t>(i)] = i < start ? 0 : start;
    check_within_cudnn_rounding(gpu, Bf16AttentionCase{1, T, 2, 1, 16, 0, true}, docs);
  }
}

// One bf16 attention problem's inputs (bf16 bits) and what the default path saved for the
// backward (cuDNN's output and lse), so that two backends can run the same backward.
struct SavedAttention {
  Shape qs, ks, ls;
  std::int64_t window = 0;
  float scale = 1.0f;
  std::vector<std::uint16_t> q, k, v, o, dout;
  std::vector<float> lse;
};
struct AttentionGrads {
  std::vector<std::uint16_t> dq, dk, dv;
};
Buffer bf16_bits_on(kernels::Backend& b, Shape shape, const std::vector<std::uint16_t>& bits) {
  Buffer out = b.allocate(DType::bf16, shape);
  b.upload(out, bits.data());
  return out;
}
// The backward's operands on one backend, allocated before it runs (so that a shortage of room
// meets only what the backward itself allocates).
struct AttentionBackward {
  Buffer q, k, v, o, dout, lse, dq, dk, dv;
  AttentionBackward(kernels::Backend& b, const SavedAttention& s)
      : q(bf16_bits_on(b, s.qs, s.q)),
        k(bf16_bits_on(b, s.ks, s.k)),
        v(bf16_bits_on(b, s.ks, s.v)),
        o(bf16_bits_on(b, s.qs, s.o)),
        dout(bf16_bits_on(b, s.qs, s.dout)),
        lse(put(b, s.ls, s.lse)),
        dq(b.allocate(DType::bf16, s.qs)),
        dk(b.allocate(DType::bf16, s.ks)),
        dv(b.allocate(DType::bf16, s.ks)) {}
  void run(kernels::Backend& b, const SavedAttention& s) {
    b.attention_backward(q, k, v, o, lse, dout, dq, dk, dv, s.window, s.scale, Tensor());
  }
  AttentionGrads grads(kernels::Backend& b) const {
    return {bits(b, dq), bits(b, dk), bits(b, dv)};
  }
};
AttentionGrads attention_grads(kernels::Backend& b, const SavedAttention& s) {
  AttentionBackward run(b, s);
  run.run(b, s);
  return run.grads(b);
}

// bf16 bits as floats.
std::vector<float> widened(const std::vector<std::uint16_t>& bits) {
  std::vector<float> out;
  for (std::uint16_t b : bits) out.push_back(core::bf16_bits_to_f32(b));
  return out;
}

// Two backwards' gradients, bit for bit.
void expect_same_bits(const AttentionGrads& a, const AttentionGrads& b) {
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

// A backward in pieces against the same problem's whole: on the emulator bit for bit (each piece
// computes its heads' gradients from their operands alone); on a GPU, where cuDNN may tile a
// smaller problem otherwise, each gradient within twice the bound that both keep to the CPU's bf16
// op (DefaultPathMatchesTheCpu's: 4u plus the reduction over 2 D + group x T terms).
void expect_the_wholes_gradients(const AttentionGrads& in_pieces, const AttentionGrads& whole,
                                 const SavedAttention& s, bool emulated) {
  if (emulated) {
    expect_same_bits(in_pieces, whole);
    return;
  }
  const std::int64_t T = s.qs[1], D = s.qs[3], group = s.qs[2] / s.ks[2];
  const double bound = 4 * kBf16U + reduction_bound(static_cast<double>(2 * D + group * T));
  EXPECT_LE(rel_l2(widened(in_pieces.dq), widened(whole.dq)), 2 * bound) << "dq";
  EXPECT_LE(rel_l2(widened(in_pieces.dk), widened(whole.dk)), 2 * bound) << "dk";
  EXPECT_LE(rel_l2(widened(in_pieces.dv), widened(whole.dv)), 2 * bound) << "dv";
}

// In a test body: the CUDA backend `name`, whose bf16 attention is cuDNN's (else the test skips).
#define REQUIRE_CUDNN_ATTENTION(name)                          \
  REQUIRE_CUDA(name);                                          \
  if (name.describe().find("fused SDPA") == std::string::npos) \
  GTEST_SKIP() << "cuDNN's attention is not on this backend: " << name.describe()

bool is_emulated(kernels::Backend& gpu) {
  return gpu.describe().find("CUDA emulator") != std::string::npos;
}

// A bf16 problem of random inputs and the default path's forward of it, saved for backwards.
SavedAttention saved_attention(kernels::Backend& gpu, std::int64_t B, std::int64_t T,
                               std::int64_t Hq, std::int64_t Hkv, std::int64_t D,
                               std::int64_t window, std::uint64_t seed) {
  SavedAttention s;
  s.qs = Shape{B, T, Hq, D};
  s.ks = Shape{B, T, Hkv, D};
  s.ls = Shape{B, Hq, T};
  s.window = window;
  s.scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto random_bits = [](Shape shape, std::uint64_t from) {
    std::vector<std::uint16_t> out;
    for (float x : bf16_values(static_cast<std::size_t>(shape.numel()), from))
      out.push_back(to_bits(x));
    return out;
  };
  s.q = random_bits(s.qs, seed);
  s.k = random_bits(s.ks, seed + 1);
  s.v = random_bits(s.ks, seed + 2);
  s.dout = random_bits(s.qs, seed + 3);
  Buffer q = bf16_bits_on(gpu, s.qs, s.q), k = bf16_bits_on(gpu, s.ks, s.k),
         v = bf16_bits_on(gpu, s.ks, s.v), o = gpu.allocate(DType::bf16, s.qs),
         lse = gpu.allocate(DType::f32, s.ls);
  gpu.attention_forward(q, k, v, o, lse, s.window, s.scale, Tensor());
  s.o = bits(gpu, o);
  s.lse = get(gpu, lse);
  return s;
}

// The backward of `s` with `room` bytes of device memory left to tandem beyond its operands. The
// room is taken as another process would take it: an allocation on a GPU, on the emulator
// TANDEM_CUDA_EMULATOR_HELD_BYTES (filling its 8 GiB would take that much host memory).
// `then`, where given, runs after the backward with the room still so (the grads returned are
// those after it).
AttentionGrads grads_with_room(kernels::Backend& gpu, const SavedAttention& s, std::int64_t room,
                               const std::function<void(AttentionBackward&)>& then = {}) {
  AttentionBackward short_of_room(gpu, s);
  {
    gpu.release_cached_memory();
    const kernels::MemoryStats m = gpu.memory_stats();
    EXPECT_GT(m.device_free, room);
    std::optional<testing::ScopedEnv> held;
    std::vector<Buffer> fillers;  // on a GPU: what the device has but `room`, in a few pieces
    if (is_emulated(gpu)) {
      held.emplace("TANDEM_CUDA_EMULATOR_HELD_BYTES", std::to_string(m.device_free - room).c_str());
    } else {
      for (int piece = 0; piece < 16; ++piece) {
        const std::int64_t take = gpu.memory_stats().device_free - room;
        if (take < (std::int64_t{2} << 20)) break;
        try {
          fillers.push_back(gpu.allocate(DType::f32, Shape{take / 4}));
        } catch (const core::OutOfMemory&) {  // the driver's own needs: half of it, then again
          fillers.push_back(gpu.allocate(DType::f32, Shape{take / 8}));
        }
      }
    }
    short_of_room.run(gpu, s);
    if (then) then(short_of_room);
  }
  // The fillers went back to the allocator's cache: to the device, for what follows.
  gpu.release_cached_memory();
  return short_of_room.grads(gpu);
}

// Where cuDNN's backward workspace finds no room, not even for one batch entry and one kv head,
// the backward runs on tandem's tensor-core kernels from cuDNN's saved output and lse (`tandem
// plan` counts on this for runs whose workspace does not fit): the refusal is said in describe(),
// the gradients are those kernels' own, bit for bit, a second backward short of room goes there
// without giving the allocator's cache back again, and with room again cuDNN's backward resumes
// (its own gradients, bit for bit).
TEST(CudaBf16, CudnnWorkspaceWithoutRoomFallsBackToTheTensorCoreKernels) {
  REQUIRE_CUDNN_ATTENTION(gpu);
  const bool emulated = is_emulated(gpu);
  // Emulated, a small problem (its cuDNN's workspace: 768 KiB, a kv head's 384 KiB) and 128 KiB
  // of room; on a GPU one whose deterministic backward's dP workspace alone is 1 GiB (256 MiB for
  // one kv head's two query heads), and 8 MiB.
  const std::int64_t T = emulated ? 256 : 8192, Hq = emulated ? 4 : 8, D = emulated ? 64 : 128;
  const std::int64_t room = emulated ? std::int64_t{128} << 10 : std::int64_t{8} << 20;
  const SavedAttention s = saved_attention(gpu, 1, T, Hq, Hq / 2, D, T / 3, 81);
  // With room: cuDNN's backward (its graph built here, not under the shortage).
  const AttentionGrads cudnn = attention_grads(gpu, s);
  ASSERT_EQ(gpu.describe().find("cuDNN refused attention"), std::string::npos) << gpu.describe();

  kernels::MemoryStats before, after;
  AttentionGrads first;
  const AttentionGrads without_room =
      grads_with_room(gpu, s, room, [&](AttentionBackward& backward) {
        first = backward.grads(gpu);
        before = gpu.memory_stats();
        backward.run(gpu, s);
        after = gpu.memory_stats();
      });
  const std::string said = gpu.describe();
  if (!emulated && said.find("no room for cuDNN's") == std::string::npos)
    GTEST_SKIP() << "this cuDNN's backward workspace for the problem fit in the " << (room >> 20)
                 << " MiB left: " << said;
  EXPECT_NE(said.find("no room for cuDNN's"), std::string::npos) << said;
  EXPECT_NE(said.find("tensor-core kernels run instead"), std::string::npos) << said;
  EXPECT_EQ(after.cache_releases, before.cache_releases);
  EXPECT_EQ(after.driver_allocations, before.driver_allocations);
  expect_same_bits(without_room, first);

  AttentionGrads tensor_cores;
  {
    const testing::ScopedEnv flash("TANDEM_CUDA_ATTENTION", "flash");
    REQUIRE_CUDA(flash_gpu);
    tensor_cores = attention_grads(flash_gpu, s);
  }
  expect_same_bits(without_room, tensor_cores);
  // The two paths round differently (cuDNN's own kernels), so the last check can tell them apart.
  EXPECT_NE(cudnn.dq, tensor_cores.dq);
  const AttentionGrads again = attention_grads(gpu, s);
  expect_same_bits(again, cudnn);
}

// The pieces tests' problem: two batch entries of four query heads on two kv heads. Emulated
// (T = 256, D = 64) the workspace is 1.5 MiB whole, 768 KiB for one entry's two kv heads (or both
// entries' one) and 384 KiB for one entry's one; on a GPU (T = 1024, D = 128) cuDNN's dP alone is
// 16, 8 and 4 MiB. So 1000 of pieces_room_unit() hold two pieces' workspace, 500 four's.
SavedAttention pieces_problem(kernels::Backend& gpu, std::uint64_t seed) {
  const bool emulated = is_emulated(gpu);
  const std::int64_t T = emulated ? 256 : 1024, D = emulated ? 64 : 128;
  return saved_attention(gpu, 2, T, 4, 2, D, T / 3, seed);
}
std::int64_t pieces_room_unit(kernels::Backend& gpu) {
  return is_emulated(gpu) ? std::int64_t{1} << 10 : std::int64_t{12} << 10;
}

// Where cuDNN's backward workspace has no room for the whole problem but has for a piece of it,
// the backward stays on cuDNN, in the largest pieces (batch entries x kv heads with their query
// heads) that have room, one after another: said in describe(), repeated bit for bit, and the
// whole problem's gradients (expect_the_wholes_gradients). With room again the whole problem runs
// at once.
TEST(CudaBf16, CudnnBackwardWithoutRoomForTheWholeRunsInPieces) {
  REQUIRE_CUDNN_ATTENTION(gpu);
  const bool emulated = is_emulated(gpu);
  const std::int64_t unit = pieces_room_unit(gpu);
  const SavedAttention s = pieces_problem(gpu, 91);
  const AttentionGrads whole = attention_grads(gpu, s);
  ASSERT_EQ(gpu.describe().find("pieces"), std::string::npos) << gpu.describe();
  // Room for one entry's two kv heads (2 pieces), then for one kv head (4 pieces).
  for (const auto& [room, pieces, shape] :
       {std::tuple{1000 * unit, 2, "1 batch entries x 2 kv heads"},
        std::tuple{500 * unit, 4, "1 batch entries x 1 kv heads"}}) {
    SCOPED_TRACE("room " + std::to_string(room) + " B");
    const AttentionGrads in_pieces = grads_with_room(gpu, s, room);
    const std::string said = gpu.describe();
    if (!emulated && said.find("pieces") == std::string::npos)
      GTEST_SKIP() << "this cuDNN's backward workspace for the problem fit in " << room
                   << " B: " << said;
    ASSERT_EQ(said.find("cuDNN refused attention backward"), std::string::npos) << said;
    // The emulator's sizes are known; a GPU's cuDNN sizes its own.
    EXPECT_NE(said.find(emulated ? fmt::format("ran in {} pieces of {}", pieces, shape) : "ran in"),
              std::string::npos)
        << said;
    expect_the_wholes_gradients(in_pieces, whole, s, emulated);
    const AttentionGrads again = grads_with_room(gpu, s, room);
    expect_same_bits(again, in_pieces);
  }
  const AttentionGrads with_room = attention_grads(gpu, s);
  expect_same_bits(with_room, whole);
}

// Under memory pressure every layer's backward meets the same shortage: once one has run in
// pieces, the next takes the pieces' workspace from the allocator's cache, with no cudaMalloc and
// without giving the cache back (a device synchronisation, then cudaMalloc again for every block
// it held, on every layer's backward).
TEST(CudaBf16, CudnnBackwardInPiecesKeepsTheAllocatorsCache) {
  REQUIRE_CUDNN_ATTENTION(gpu);
  const bool emulated = is_emulated(gpu);
  const std::int64_t room = 1000 * pieces_room_unit(gpu);  // two pieces' workspace
  const SavedAttention s = pieces_problem(gpu, 93);
  const AttentionGrads whole = attention_grads(gpu, s);
  kernels::MemoryStats before, after;
  std::string first_said;
  const AttentionGrads second = grads_with_room(gpu, s, room, [&](AttentionBackward& backward) {
    first_said = gpu.describe();
    before = gpu.memory_stats();
    backward.run(gpu, s);
    after = gpu.memory_stats();
  });
  if (!emulated && first_said.find("pieces") == std::string::npos)
    GTEST_SKIP() << "this cuDNN's backward workspace for the problem fit in " << room
                 << " B: " << first_said;
  EXPECT_NE(first_said.find(emulated ? "ran in 2 pieces" : "ran in"), std::string::npos)
      << first_said;
  EXPECT_EQ(after.driver_allocations, before.driver_allocations);
  EXPECT_EQ(after.cache_releases, before.cache_releases);
  expect_the_wholes_gradients(second, whole, s, emulated);
}

// TANDEM_CUDA_CUDNN_BACKWARD_PIECES=N cuts cuDNN's backward into N pieces or more where the whole
// has room (the attention benchmark times it so), or into the most there are: the gradients are the
// whole's as above. Anything but a whole number from 1 is refused when the backend is made.
TEST(CudaBf16, CudnnBackwardPiecesCanBeAskedFor) {
  REQUIRE_CUDNN_ATTENTION(gpu);
  const bool emulated = is_emulated(gpu);
  const std::int64_t B = 2, Hq = 4, Hkv = 2, T = 128, D = 64;
  const SavedAttention s = saved_attention(gpu, B, T, Hq, Hkv, D, 50, 97);
  const AttentionGrads whole = attention_grads(gpu, s);
  for (const auto& [asked, said] :
       {std::pair{"2", "ran in 2 pieces of 1 batch entries x 2 kv heads"},
        std::pair{"3", "ran in 4 pieces of 1 batch entries x 1 kv heads"},
        std::pair{"100", "ran in 4 pieces of 1 batch entries x 1 kv heads"}}) {
    SCOPED_TRACE(std::string("TANDEM_CUDA_CUDNN_BACKWARD_PIECES=") + asked);
    const testing::ScopedEnv pieces("TANDEM_CUDA_CUDNN_BACKWARD_PIECES", asked);
    REQUIRE_CUDA(cut);
    const AttentionGrads in_pieces = attention_grads(cut, s);
    EXPECT_NE(cut.describe().find(said), std::string::npos) << cut.describe();
    expect_the_wholes_gradients(in_pieces, whole, s, emulated);
  }
  for (const char* bad : {"0", "two", "-1"}) {
    const testing::ScopedEnv pieces("TANDEM_CUDA_CUDNN_BACKWARD_PIECES", bad);
    try {
      kernels::make_backend("cuda");
      ADD_FAILURE() << "TANDEM_CUDA_CUDNN_BACKWARD_PIECES=" << bad << " was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected a whole number of pieces"), std::string::npos)
          << e.what();
    }
  }
}

// Pieces whose lse would start off the 16 bytes cuDNN's tensors are declared with are not taken
// (an odd T): with room only for one kv head's piece, which would, the backward falls back to the
// tensor-core kernels for want of room; with room for one batch entry's piece (its lse 16-byte
// aligned), it runs in those pieces. Emulated only: the emulator's cuDNN checks every pointer
// against the 16 bytes, and the sizes are its own.
TEST(CudaBf16, CudnnBackwardPiecesKeepTheirLseSixteenByteAligned) {
  REQUIRE_CUDA(gpu);
  if (!is_emulated(gpu)) GTEST_SKIP() << "the workspace sizes here are the CUDA emulator's";
  // T = 255: whole 1.5 MiB, one entry's two kv heads 767 KiB, one entry's kv head 384 KiB (its
  // lse at 2040-byte steps).
  const SavedAttention s = saved_attention(gpu, 2, 255, 4, 2, 64, 85, 95);
  const AttentionGrads whole = attention_grads(gpu, s);
  const AttentionGrads in_pieces = grads_with_room(gpu, s, std::int64_t{1000} << 10);
  EXPECT_NE(gpu.describe().find("ran in 2 pieces of 1 batch entries x 2 kv heads"),
            std::string::npos)
      << gpu.describe();
  expect_same_bits(in_pieces, whole);
  grads_with_room(gpu, s, std::int64_t{500} << 10);
  const std::string said = gpu.describe();
  EXPECT_NE(said.find("no room for cuDNN's"), std::string::npos) << said;
  EXPECT_EQ(said.find("aligned"), std::string::npos) << said;
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
