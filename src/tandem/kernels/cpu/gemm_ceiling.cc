#include "tandem/kernels/cpu/gemm_ceiling.h"

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
  std::int64_t reps = 0;
  auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  do {
    once();
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
         static_cast<double>(reps) / elapsed / 1e9;
}

}  // namespace tandem::kernels::cpu
