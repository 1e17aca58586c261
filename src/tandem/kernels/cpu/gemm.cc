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
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                          A, lda, B, ldb, beta, C, ldc);
  TANDEM_CHECK(status == dnnl_success,
               "gemm: dnnl_sgemm failed with status {} (M={} N={} K={} lda={} ldb={} ldc={}, "
               "trans_a={} trans_b={})",
               static_cast<int>(status), M, N, K, lda, ldb, ldc, trans_a, trans_b);
}

}  // namespace tandem::kernels::cpu
