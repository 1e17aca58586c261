#include "tandem/train/mfu.h"

#include <algorithm>
#include <chrono>

#include "tandem/core/error.h"

namespace tandem::train {

HardwarePeak hardware_peak(const kernels::Backend& backend, std::optional<double> peak_tflops,
                           int world_size) {
  HardwarePeak p;
  p.devices = world_size;
  if (peak_tflops) {
    p.flops_per_device = *peak_tflops * 1e12;
    p.source = "trainer.peak_tflops";
  } else {
    p.flops_per_device = backend.peak_flops(kernels::DType::f32);
    p.source = backend.describe_peak(kernels::DType::f32);
  }
  TANDEM_CHECK(p.flops_per_device > 0, "the hardware peak is unknown ({}): set trainer.peak_tflops",
               p.source);
  return p;
}

double mfu(double tokens_per_second, double flops_per_token, const HardwarePeak& peak) {
  return tokens_per_second * flops_per_token / peak.total();
}

double measure_gemm_flops(kernels::Backend& backend, std::int64_t m, std::int64_t n, std::int64_t k,
                          double min_seconds) {
  kernels::Buffer a = backend.allocate(kernels::DType::f32, kernels::Shape{m, k});
  kernels::Buffer b = backend.allocate(kernels::DType::f32, kernels::Shape{k, n});
  kernels::Buffer c = backend.allocate(kernels::DType::f32, kernels::Shape{m, n});
  backend.fill(a, 0.5f);
  backend.fill(b, 0.25f);
  auto once = [&] {
    backend.gemm(false, false, 1.0f, a, b, 0.0f, c);
    backend.synchronize();
  };
  once();
  // The fastest repetition, not the mean: a ceiling is what the hardware can do, and the mean of
  // a short window drops far when anything else briefly takes a core.
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  double best = 0.0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (seconds > 0) best = std::max(best, flops / seconds);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           min_seconds);
  return best;
}

}  // namespace tandem::train
