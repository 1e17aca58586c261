// Helpers for the kernel tests: random inputs, error measures and central finite differences in
// double precision on the tests' own straightforward double references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace tandem::kernels::cpu::testing {

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// max |a - b| / max(max |b|, floor): error relative to the reference's scale.
inline double max_scaled_error(const std::vector<float>& a, const std::vector<double>& b,
                               double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double scale = floor;
  for (double x : b) scale = std::max(scale, std::abs(x));
  double err = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return err / scale;
}

// Central differences of a scalar double function at x, for the listed coordinates (all if empty).
// Coordinates not listed get NaN so that a comparison must skip them.
inline std::vector<double> numeric_gradient(
    const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
    const std::vector<std::size_t>& coords = {}, double h = 1e-6) {
  std::vector<double> grad(x.size(), std::nan(""));
  auto one = [&](std::size_t i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = f(x);
    x[i] = saved - h;
    const double minus = f(x);
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * h);
  };
  if (coords.empty()) {
    for (std::size_t i = 0; i < x.size(); ++i) one(i);
  } else {
    for (std::size_t i : coords) one(i);
  }
  return grad;
}

// Like max_scaled_error but only over coordinates where the reference is not NaN.
// floor: the smallest scale, for gradients that are exactly zero (then it is an absolute bound).
inline double max_scaled_gradient_error(const std::vector<float>& analytic,
                                        const std::vector<double>& numeric, double floor = 1e-30) {
  double scale = floor;
  double err = 0.0;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    if (std::isnan(numeric[i])) continue;
    scale = std::max(scale, std::abs(numeric[i]));
    err = std::max(err, std::abs(static_cast<double>(analytic[i]) - numeric[i]));
  }
  return err / scale;
}

inline std::vector<std::size_t> sample_coords(std::size_t n, std::size_t count,
                                              std::uint64_t seed) {
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = i;
  if (count >= n) return all;
  std::mt19937_64 gen(seed);
  std::shuffle(all.begin(), all.end(), gen);
  all.resize(count);
  return all;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Gradient tolerance, relative to the gradient's largest magnitude: the kernels run in fp32
// (unit roundoff 6e-8, a few hundred roundings deep at these sizes gives ~1e-6 relative), while
// double central differences with h = 1e-6 are accurate to ~1e-9. 1e-4 leaves a wide margin for
// fp32 noise yet any wrong term in a backward formula shows up as an O(1e-1..1) error.
constexpr double kGradTolerance = 1e-4;
// Forward tolerance against the double reference, same scale convention: fp32 accumulation.
constexpr double kForwardTolerance = 1e-5;

}  // namespace tandem::kernels::cpu::testing
