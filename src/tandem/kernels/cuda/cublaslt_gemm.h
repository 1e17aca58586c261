// Row-major GEMMs through cuBLASLt for the CUDA backend: C[M,N] = alpha op(A) op(B) + beta C with
// fp32 accumulation. fp32 operands run in true fp32 (CUBLAS_COMPUTE_32F: TF32 is never used, the
// parity mode); bf16 operands use the tensor cores with fp32 accumulation and an fp32 or bf16 C.
//
// Determinism: the algorithm for a shape is chosen once by cuBLASLt's heuristic and cached (no
// atomics mode is ever enabled), and algorithms without split-K are asked for first
// (CUBLASLT_REDUCTION_SCHEME_NONE; cuBLASLt's split-K schemes, which also reduce in a fixed order,
// only where none exists), so the same call gives the same bits every time on the same GPU.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "tandem/kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, void* workspace, std::size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Row-major, leading dimensions in elements. A and B share one element type; C is f32 or bf16.
  void run(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const void* A, i64 lda,
           const void* B, i64 ldb, Elem ab, float beta, void* C, i64 ldc, Elem c);

  std::string version() const;

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // (trans_a, trans_b, M, N, K, lda, ldb, ldc, operand type, C type, alignment class, beta == 0)
  using Key = std::tuple<bool, bool, i64, i64, i64, i64, i64, i64, int, int, int, bool>;
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  void* workspace_;
  std::size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace tandem::kernels::cuda
