#include "tandem/kernels/cpu/gemm_ceiling.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

double measure_fp32_gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k,
                                double min_seconds) {
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.5f),
      b(static_cast<std::size_t>(k * n), 0.25f), c(static_cast<std::size_t>(m * n), 0.0f);
  auto once = [&] {
    gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  };
  once();
  // The fastest repetition, not the mean: a ceiling is what the hardware can do, and the mean
  // of a short window drops far (seen: 88 instead of 146 GFLOP/s) when anything else briefly
  // takes a core, which then shows as an MFU above 100%.
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  double best = 0.0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (seconds > 0) best = std::max(best, flops / seconds / 1e9);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           min_seconds);
  return best;
}

}  // namespace tandem::kernels::cpu
