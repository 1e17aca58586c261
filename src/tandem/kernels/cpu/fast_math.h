// Small vectorised math helpers shared by the CPU kernels (internal header).
// glibc's expf only vectorises under -ffast-math, which parity forbids, and GCC will not
// if-convert a scalar exp with clamping into vector code, so the exp here is written once over
// GCC vector types (8 floats: AVX2 with -march=native; plain SSE/scalar code elsewhere).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace tandem::kernels::cpu::detail {

using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = std::int32_t __attribute__((vector_size(32)));
constexpr int kLanes = 8;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }
inline f32x8 splat8(float x) { return f32x8{} + x; }

// exp(x) in fp32 to within 1 ulp (checked over [-110, 89] including subnormal results).
// Only the input is clamped: below -150 the two-step scaling underflows to exactly 0 (so
// exp(-inf) = 0), above 89 it overflows to +inf, and NaN passes through every step.
inline f32x8 exp8(f32x8 x) {
  const f32x8 lo = splat8(-150.0f), hi = splat8(89.0f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // n = round(x / ln2) by the 1.5 * 2^23 trick (exact for |v| < 2^22; no fast-math here).
  const f32x8 round_magic = splat8(12582912.0f);
  const f32x8 n = (x * 1.44269504088896341f + round_magic) - round_magic;
  f32x8 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes coefficients).
  f32x8 p = splat8(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // Scale by 2^n in two steps so that subnormal results come out right.
  const i32x8 ni = __builtin_convertvector(n, i32x8);
  const i32x8 n1 = ni >> 1;
  const i32x8 n2 = ni - n1;
  const f32x8 s1 = (f32x8)((n1 + 127) << 23);
  const f32x8 s2 = (f32x8)((n2 + 127) << 23);
  return p * s1 * s2;
}

// Scalar exp with exactly the same numerics (for loop tails).
inline float exp_f32(float x) {
  f32x8 v = splat8(x);
  return exp8(v)[0];
}

// x[i] = exp(x[i] - shift) for i < n; returns the sum of the results, accumulated in a fixed lane
// order (deterministic).
inline float exp_shifted_sum(float* x, std::int64_t n, float shift) {
  const f32x8 s = splat8(shift);
  f32x8 acc = f32x8{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x8 e = exp8(load8(x + i) - s);
    store8(x + i, e);
    acc += e;
  }
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  for (; i < n; ++i) {
    x[i] = exp_f32(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// As exp_shifted_sum, but the sum is kept in double (blocks of 8 x 64 floats summed in fp32 lanes,
// then added in double), for long rows such as a 100k-entry vocabulary.
inline double exp_shifted_sum_double(float* x, std::int64_t n, float shift) {
  constexpr std::int64_t kBlock = 64 * kLanes;
  double sum = 0.0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    sum += exp_shifted_sum(x + b, n - b < kBlock ? n - b : kBlock, shift);
  }
  return sum;
}

}  // namespace tandem::kernels::cpu::detail
