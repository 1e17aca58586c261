// Small vectorisable math helpers shared by the CPU kernels (internal header).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tandem::kernels::cpu::detail {

// exp(x) in fp32, accurate to about 1 ulp, written without library calls so that loops calling it
// vectorise (glibc's expf only vectorises under -ffast-math, which parity forbids).
// exp(-inf) = 0, large inputs saturate to +inf; NaN propagates.
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  const float clamped = std::fmin(std::fmax(x, -104.0f), 88.7f);
  const float n = std::nearbyint(clamped * kLog2e);
  float r = clamped - n * kLn2Hi;
  r = r - n * kLn2Lo;
  // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // Scale by 2^n in two steps so that results in the subnormal range stay finite and correct.
  const std::int32_t ni = static_cast<std::int32_t>(n);
  const std::int32_t n1 = ni / 2;
  const std::int32_t n2 = ni - n1;
  std::int32_t b1 = (n1 + 127) << 23;
  std::int32_t b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  float result = p * s1 * s2;
  if (x > 88.7f) result = std::numeric_limits<float>::infinity();
  if (x < -104.0f) result = 0.0f;
  if (x != x) result = x;
  return result;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace tandem::kernels::cpu::detail
