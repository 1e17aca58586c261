// Measures this machine's fp32 GEMM throughput through the same gemm the kernels use; the
// trainer's MFU on CPU divides by it (the practical ceiling, not a datasheet number).
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// GFLOP/s of C[m,n] = A[m,k] B[k,n]: the fastest of the repetitions run for at least min_seconds
// (after one warm-up call).
double measure_fp32_gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, double min_seconds);

}  // namespace tandem::kernels::cpu
