// Helpers of the bf16 CUDA tests (bf16_ops_test.cc, bf16_attention_test.cc): bf16-representable
// inputs on both backends in both precisions (Quad), the bit-level and one-step comparisons of
// bf16 outputs, and the bits of a bf16 attention run for the determinism tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/core/bfloat16.h"

namespace tandem::cuda_testing {

inline constexpr double kBf16U = 1.0 / 256.0;  // bf16's unit roundoff: 8 significant bits
inline constexpr double kGemmBound = kBf16U + 1e-5;

inline std::uint16_t to_bits(float v) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
  return core::is_nan_bits(b) ? std::uint16_t{0xFFFF} : core::bf16_round_bits(b);
}

// Normal random values rounded to bf16, so that f32 and bf16 tensors hold the same numbers.
inline std::vector<float> bf16_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v = normal(n, seed, scale);
  for (float& x : v) x = core::bf16_bits_to_f32(to_bits(x));
  return v;
}

// The same values as f32 and as bf16, on the CPU and on the GPU.
struct Quad {
  Buffer cf, cb, gf, gb;  // cpu f32, cpu bf16, gpu f32, gpu bf16
};

inline Buffer bf16_on(Backend& b, Shape shape, const std::vector<float>& values) {
  Buffer wide = put(b, shape, values);
  Buffer narrow = b.allocate(DType::bf16, shape);
  b.cast(narrow, wide);
  return narrow;
}

inline Quad quad(Backend& gpu, Shape shape, const std::vector<float>& values) {
  return {put(testing::cpu_backend(), shape, values),
          bf16_on(testing::cpu_backend(), shape, values), put(gpu, shape, values),
          bf16_on(gpu, shape, values)};
}
inline Quad quad_zeros(Backend& gpu, Shape shape) {
  return quad(gpu, shape, std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.0f));
}
inline Quad quad_i64(Backend& gpu, Shape shape, const std::vector<std::int64_t>& values) {
  return {put_i64(testing::cpu_backend(), shape, values),
          put_i64(testing::cpu_backend(), shape, values), put_i64(gpu, shape, values),
          put_i64(gpu, shape, values)};
}

// The raw 16-bit patterns of a bf16 tensor.
inline std::vector<std::uint16_t> bits(Backend& b, const Tensor& t) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(t.numel()));
  b.download(out.data(), t);
  return out;
}
// A bf16 or f32 tensor's values as floats.
inline std::vector<float> values(Backend& b, const Tensor& t) {
  if (t.dtype() == DType::f32) return get(b, t);
  Buffer wide = b.allocate(DType::f32, t.shape());
  b.cast(wide, t);
  return get(b, wide);
}

// Bit for bit: the GPU's bf16 output is its fp32 output rounded once.
inline void expect_rounded(Backend& gpu, const Quad& q, const char* what) {
  const std::vector<float> f = get(gpu, q.gf);
  const std::vector<std::uint16_t> b = bits(gpu, q.gb);
  ASSERT_EQ(f.size(), b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < f.size(); ++i) bad += b[i] != to_bits(f[i]);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << f.size()
                     << " bf16 values are not the rounded fp32 result";
}

// bf16 patterns as integers ordered like the values they hold (so neighbours differ by 1).
inline std::int32_t ordered(std::uint16_t b) {
  return (b & 0x8000) ? -static_cast<std::int32_t>(b & 0x7FFF) : static_cast<std::int32_t>(b);
}

// The GPU's and the CPU's bf16 outputs: equal (exact) or at most one bf16 step apart. An output
// of a reduction that cancels to (nearly) zero is within the fp32 results' own difference of each
// other instead: `reduction_terms` > 0 allows each value that far from the CPU's, the fp32 bound of
// cuda_test_util.h times the largest CPU value. (Attention's first query row sees one key, so its
// dS = P (dP - delta) is exactly zero: one backend gets 0, the other 1e-7 from summing delta in
// another order, and those are thousands of bf16 steps apart.)
inline void expect_bf16_close(Backend& gpu, const Quad& q, bool exact, const char* what,
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

inline double gpu_vs_cpu(Backend& gpu, const Tensor& g, const Tensor& c) {
  return rel_l2(values(gpu, g), values(testing::cpu_backend(), c));
}
// Two tensors of the GPU (its bf16 result against its fp32 one).
inline double gpu_vs_gpu(Backend& gpu, const Tensor& a, const Tensor& b) {
  return rel_l2(values(gpu, a), values(gpu, b));
}

// The bits of a bf16 attention forward and backward (window 50, with or without documents).
inline std::vector<std::uint16_t> attention_bits(Backend& gpu, bool documents) {
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

}  // namespace tandem::cuda_testing
