// Model FLOPs utilisation: the model's FLOPs per second (global tokens/s x FLOPs per token,
// sliding-window aware: ModelConfig::flops_per_token) over the stated hardware peak of all devices
// (the backend's peak per device, or trainer.peak_tflops, times the world size). The measured GEMM
// ceiling is a separate, labelled figure: it depends on what else the machine is doing, so it is
// never the MFU denominator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tandem/kernels/backend.h"

namespace tandem::train {

struct HardwarePeak {
  double flops_per_device = 0.0;  // FLOP/s
  int devices = 1;                // data-parallel ranks
  std::string source;             // "trainer.peak_tflops" or the backend's description
  double total() const { return flops_per_device * devices; }
};

HardwarePeak hardware_peak(const kernels::Backend& backend, std::optional<double> peak_tflops,
                           int world_size);

// tokens_per_second (global) x flops_per_token / peak.total().
double mfu(double tokens_per_second, double flops_per_token, const HardwarePeak& peak);

// FLOP/s of the backend's fp32 GEMM C[m,n] = A[m,k] B[k,n]: the fastest repetition over at least
// min_seconds after one warm-up (a practical ceiling, reported next to the MFU).
double measure_gemm_flops(kernels::Backend& backend, std::int64_t m, std::int64_t n, std::int64_t k,
                          double min_seconds);

}  // namespace tandem::train
