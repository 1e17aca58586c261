// The CUDA emulator's cuBLASLt (tests/cuda_emulator/cublaslt.cc): the column-major product for
// every transpose, leading dimension and type tandem uses, and the refusals cuBLASLt makes
// (impossible layouts, unsupported types, misaligned or out-of-allocation pointers).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "emulator_test_util.h"

namespace {

using cuda_emulator_test::device;
using cuda_emulator_test::host;
using cuda_emulator_test::normal;

struct Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Gemm(cublasOperation_t ta, cublasOperation_t tb, cudaDataType_t ab, cudaDataType_t ct,
       std::uint64_t m, std::uint64_t n, std::uint64_t k, std::int64_t lda, std::int64_t ldb,
       std::int64_t ldc) {
    cublasLtCreate(&handle);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(std::int32_t));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(std::int32_t));
    cublasLtMatrixLayoutCreate(&a, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
    cublasLtMatrixLayoutCreate(&b, ab, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
    cublasLtMatrixLayoutCreate(&c, ct, m, n, ldc);
  }
  cublasStatus_t choose(std::uint32_t alignment = 256) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof alignment);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1, &result, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    algo = result.algo;
    return s == CUBLAS_STATUS_SUCCESS && count == 1 ? s : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  cublasStatus_t run(float alpha, const void* A, const void* B, float beta, void* C) {
    return cublasLtMatmul(handle, desc, &alpha, A, a, B, b, &beta, C, c, C, c, &algo, nullptr, 0,
                          nullptr);
  }
  ~Gemm() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
};

float bf16_value(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return __bfloat162float(b);
}

// Column-major, both operands transposed or not, padded leading dimensions, fp32 and bf16.
TEST(CudaEmulator, CublasLtMatmulIsTheColumnMajorProduct) {
  const std::int64_t m = 5, n = 7, k = 9, pad = 3;
  for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF}) {
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        const std::int64_t a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
        const std::int64_t b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
        const std::int64_t lda = a_rows + pad, ldb = b_rows + pad, ldc = m + pad;
        std::vector<float> A = normal(lda * a_cols, 3), B = normal(ldb * b_cols, 4),
                           C = normal(ldc * n, 5);
        if (type == CUDA_R_16BF)
          for (auto* v : {&A, &B, &C})
            for (float& x : *v) x = bf16_value(x);
        auto to_device = [&](const std::vector<float>& v) -> void* {
          if (type == CUDA_R_32F) return device(v);
          std::vector<__nv_bfloat16> h(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16_rn(v[i]);
          return device(h);
        };
        void *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
        Gemm g(ta, tb, type, type, m, n, k, lda, ldb, ldc);
        ASSERT_EQ(g.choose(), CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(g.run(0.5f, dA, dB, -2.0f, dC), CUBLAS_STATUS_SUCCESS);
        std::vector<float> out(static_cast<std::size_t>(ldc * n));
        if (type == CUDA_R_32F) {
          out = host(static_cast<float*>(dC), out.size());
        } else {
          const auto h = host(static_cast<__nv_bfloat16*>(dC), out.size());
          for (std::size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
        }
        for (std::int64_t j = 0; j < n; ++j) {
          for (std::int64_t i = 0; i < m; ++i) {
            double s = 0.0;
            for (std::int64_t p = 0; p < k; ++p) {
              const double x = ta == CUBLAS_OP_N ? A[i + p * lda] : A[p + i * lda];
              const double y = tb == CUBLAS_OP_N ? B[p + j * ldb] : B[j + p * ldb];
              s += x * y;
            }
            const double ref = 0.5 * s - 2.0 * C[i + j * ldc];
            const double tol = type == CUDA_R_32F ? 1e-5 : 1e-2 * (std::fabs(ref) + 1.0);
            EXPECT_NEAR(out[i + j * ldc], ref, tol)
                << "type " << type << " ta " << ta << " tb " << tb << " at " << i << "," << j;
          }
          for (std::int64_t i = m; i < ldc; ++i)  // the padding rows are not written
            EXPECT_EQ(out[i + j * ldc], C[i + j * ldc]);
        }
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dC);
      }
    }
  }
}

TEST(CudaEmulator, CublasLtRefusesWhatCublasLtRefuses) {
  std::vector<float> x(64, 1.0f);
  float* d = device(x);
  {  // beta = 0: C is not read, so a NaN there does not reach D
    std::vector<float> nan_c(4, std::nanf(""));
    float* c = device(nan_c);
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 2, 2, 2, 2);
    ASSERT_EQ(g.choose(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(g.run(1.0f, d, d, 0.0f, c), CUBLAS_STATUS_SUCCESS);
    for (float v : host(c, 4)) EXPECT_EQ(v, 2.0f);
    cudaFree(c);
  }
  {  // a leading dimension below the row count
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 4, 2, 2, 3, 2, 4);
    EXPECT_NE(g.choose(), CUBLAS_STATUS_SUCCESS);
  }
  {  // fp32 operands into a bf16 output: no such kernel
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_16BF, 2, 2, 2, 2, 2, 2);
    EXPECT_NE(g.choose(), CUBLAS_STATUS_SUCCESS);
  }
  {  // pointers less aligned than the algorithm was chosen for
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 2, 2, 2, 2);
    ASSERT_EQ(g.choose(16), CUBLAS_STATUS_SUCCESS);
    EXPECT_NE(g.run(1.0f, d + 1, d, 0.0f, d + 32), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.run(1.0f, d + 4, d, 0.0f, d + 32), CUBLAS_STATUS_SUCCESS);
  }
  {  // an operand reaching past its allocation
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 4, 4, 4, 4, 4, 4);
    ASSERT_EQ(g.choose(4), CUBLAS_STATUS_SUCCESS);  // alignment is not what is tested here
    EXPECT_EQ(g.run(1.0f, d + 48, d, 0.0f, d + 16), CUBLAS_STATUS_SUCCESS);
    EXPECT_NE(g.run(1.0f, d + 56, d, 0.0f, d + 16), CUBLAS_STATUS_SUCCESS);
    std::vector<float> host_c(16);
    EXPECT_NE(g.run(1.0f, d, d, 0.0f, host_c.data()), CUBLAS_STATUS_SUCCESS);
  }
  cudaFree(d);
}

}  // namespace
