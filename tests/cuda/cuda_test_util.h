// Helpers for the CUDA backend's tests: the backend (or the reason to skip: built without CUDA, or
// no GPU visible), host <-> backend copies, relative L2 errors, and the error bounds the tests use.
//
// Bounds are derived, not tuned: u = 2^-24 is fp32's unit roundoff. A sum of K fp32 terms computed
// in any order is within K u of the exact sum relative to the sum of the terms' magnitudes; with
// standard normal inputs that is within a small factor of the result's own norm, so two fp32
// implementations of a K-term reduction agree within 2 K u in relative L2 (kernels that add in
// double contribute nothing at this scale). Elementwise ops differ by a few roundings (nvcc's
// fused multiply-adds, expf within 2 ulp against the CPU's 1-ulp exp): 16 u. A wrong index, a
// missing term or a transposed operand gives errors of order 1e-1..1, far above every bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/kernels/backend.h"

namespace tandem::cuda_testing {

using kernels::Backend;
using kernels::Buffer;
using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

constexpr double kU = 5.9604644775390625e-08;  // 2^-24
constexpr double kElementwise = 16 * kU;
inline double reduction_bound(double terms) { return 2.0 * terms * kU; }

// The CUDA backend, or null with the reason in `why`.
inline std::unique_ptr<Backend> cuda_backend(std::string* why) {
  try {
    return kernels::make_backend("cuda");
  } catch (const core::Error& e) {
    *why = e.what();
    return nullptr;
  }
}

// In a test body: `REQUIRE_CUDA(gpu);` declares `gpu` (a Backend&) or skips the test with the
// reason.
#define REQUIRE_CUDA(name)                                              \
  std::string name##_why;                                               \
  std::unique_ptr<::tandem::kernels::Backend> name##_owner =            \
      ::tandem::cuda_testing::cuda_backend(&name##_why);                \
  if (!name##_owner) GTEST_SKIP() << "no CUDA backend: " << name##_why; \
  ::tandem::kernels::Backend& name = *name##_owner

// In a test body that only needs a GPU to exist (the backend is made and released here).
#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    std::string why_;                                                                              \
    if (!::tandem::cuda_testing::cuda_backend(&why_)) GTEST_SKIP() << "no CUDA backend: " << why_; \
  } while (0)

inline std::vector<float> normal(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

// A buffer on `b` holding `values`.
inline Buffer put(Backend& b, Shape shape, const std::vector<float>& values) {
  Buffer buf = b.allocate(DType::f32, shape);
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), buf.numel());
  b.upload(buf, values.data());
  return buf;
}
inline Buffer put_i64(Backend& b, Shape shape, const std::vector<std::int64_t>& values) {
  Buffer buf = b.allocate(DType::i64, shape);
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), buf.numel());
  b.upload(buf, values.data());
  return buf;
}
inline std::vector<float> get(Backend& b, const Tensor& t) { return kernels::to_host_f32(b, t); }

// ||a - b|| / ||b|| (0 when both are zero).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(diff)) return INFINITY;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Each row of [B, T] as two documents, the second starting at T / 2: a document start per token,
// for the kernels' and the model's intra-document masking.
inline std::vector<std::int64_t> two_documents_per_row(std::int64_t B, std::int64_t T) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(B * T));
  for (std::int64_t i = 0; i < B * T; ++i) out[i] = (i % T) >= T / 2 ? T / 2 : 0;
  return out;
}

// True when every query of [B, T] sees only itself: T = 1, window 1, or every token the start
// of its own document (`doc_starts`: a start per token, empty for no documents). Then P = 1 and
// dS = dout.v - dout.out = 0 exactly, so an attention backward's dq and dk are fp32 cancellation
// residue, which a relative distance between two backends cannot judge.
inline bool every_query_sees_only_itself(std::int64_t B, std::int64_t T, std::int64_t window,
                                         const std::vector<std::int64_t>& doc_starts) {
  if (T == 1 || window == 1) return true;
  if (doc_starts.empty()) return false;
  for (std::int64_t i = 0; i < B * T; ++i)
    if (doc_starts[i] != i % T) return false;
  return true;
}

// The bound on that residue: the two D-term fp32 dot products whose difference is dS, each within
// reduction_bound(D) of its sum of |terms| <= D max|dout| max|v|, times scale, the largest |q| or
// |k| it multiplies, and the `group` query heads dk sums over.
inline double self_only_residue_bound(double scale, std::int64_t D, std::int64_t group,
                                      double max_dout, double max_v, double max_qk) {
  const double ds =
      2 * reduction_bound(static_cast<double>(D)) * static_cast<double>(D) * max_dout * max_v;
  return scale * ds * max_qk * static_cast<double>(group);
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Where every query sees only itself, dq and dk are residue (self_only_residue_bound): each
// backend's within the bound (max_abs of the gradients as each backend computed them).
inline void expect_self_only_residue(double residue, const std::vector<float>& gpu_dq,
                                     const std::vector<float>& gpu_dk,
                                     const std::vector<float>& cpu_dq,
                                     const std::vector<float>& cpu_dk) {
  EXPECT_LE(max_abs(gpu_dq), residue) << "self-only dq";
  EXPECT_LE(max_abs(gpu_dk), residue) << "self-only dk";
  EXPECT_LE(max_abs(cpu_dq), residue) << "self-only dq, CPU";
  EXPECT_LE(max_abs(cpu_dk), residue) << "self-only dk, CPU";
}

// TANDEM_TEST_SEED (default 1): the seed of the tests that draw random problems (they name it in
// their failure messages, so that a failing draw can be run again).
inline std::uint64_t test_seed() {
  const char* s = std::getenv("TANDEM_TEST_SEED");
  return s != nullptr && *s != 0 ? std::strtoull(s, nullptr, 10) : 1;
}

// One random attention problem's geometry for the random-problem tests: B 1-2, T 1-200 (1-20 a
// fifth of the time), 1-3 kv heads, groups of 1-4, head_dim from `head_dim(uniform)`, and no
// window, one within the row or one beyond it (a third each).
struct AttentionDraw {
  std::int64_t B, T, Hq, Hkv, D, window;
};
template <typename HeadDim>
AttentionDraw draw_attention(std::mt19937_64& gen, HeadDim&& head_dim) {
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  AttentionDraw d{};
  d.B = uniform(1, 2);
  d.T = uniform(0, 4) == 0 ? uniform(1, 20) : uniform(1, 200);
  d.Hkv = uniform(1, 3);
  d.Hq = d.Hkv * uniform(1, 4);
  d.D = head_dim(uniform);
  const std::int64_t w = uniform(0, 2);
  d.window = w == 0 ? 0 : w == 1 ? uniform(1, d.T) : d.T + uniform(1, 10);
  return d;
}

// Next-token labels of `ids` (flattened [B, T]) with the last and every fifth position ignored,
// so that a loss normalised by the count of labels is tested too.
inline std::vector<std::int64_t> next_token_labels(const std::vector<std::int64_t>& ids) {
  std::vector<std::int64_t> labels(ids.begin() + 1, ids.end());
  labels.push_back(core::kIgnoreIndex);
  for (std::size_t n = 0; n < labels.size(); n += 5) labels[n] = core::kIgnoreIndex;
  return labels;
}

}  // namespace tandem::cuda_testing
