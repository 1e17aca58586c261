// Matrix multiply through oneDNN's row-major sgemm. Inside an OpenMP parallel region oneDNN runs
// single-threaded, so the tiled kernels can call it per tile.
#include <oneapi/dnnl/dnnl.h>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void gemm(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
          const float* B, i64 ldb, float beta, float* C, i64 ldc) {
  TANDEM_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // C = beta * C, as BLAS defines it (beta = 0 writes zeros without reading C). oneDNN refuses
    // the zero leading dimension of an empty [M, 0] operand.
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                          A, lda, B, ldb, beta, C, ldc);
  TANDEM_CHECK(status == dnnl_success,
               "gemm: dnnl_sgemm failed with status {} (M={} N={} K={} lda={} ldb={} ldc={}, "
               "trans_a={} trans_b={})",
               static_cast<int>(status), M, N, K, lda, ldb, ldc, trans_a, trans_b);
}

}  // namespace tandem::kernels::cpu
