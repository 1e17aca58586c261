#include "tandem/kernels/cuda/cublaslt_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "tandem/core/error.h"

namespace tandem::kernels::cuda {
namespace {

void check(cublasStatus_t rc, const char* call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  core::fail("cuBLASLt {} failed: {} ({})", call, cublasLtGetStatusString(rc),
             static_cast<int>(rc));
}

cudaDataType_t data_type(Elem e) { return e == Elem::f32 ? CUDA_R_32F : CUDA_R_16BF; }

// The largest power of two (at most 256) dividing every address: cuBLASLt picks kernels by it.
int alignment(const void* a, const void* b, const void* c) {
  const auto bits = reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
                    reinterpret_cast<std::uintptr_t>(c) | std::uintptr_t{256};
  return static_cast<int>(bits & (~bits + 1));
}

}  // namespace

LtGemm::LtGemm(cudaStream_t stream, void* workspace, std::size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
}

LtGemm::~LtGemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

std::string LtGemm::version() const {
  const std::size_t v = cublasLtGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

const LtGemm::Plan& LtGemm::plan(const Key& key) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  const auto [trans_a, trans_b, M, N, K, lda, ldb, ldc, ab_type, c_type, align, beta_zero] = key;
  const cudaDataType_t ab = data_type(static_cast<Elem>(ab_type));
  const cudaDataType_t ct = data_type(static_cast<Elem>(c_type));
  Plan p;
  // Column-major view of the row-major problem: C^T[N,M] = op(B)^T op(A)^T, so cuBLASLt's first
  // operand is our B and its second our A, each stored transposed from its point of view.
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                       sizeof(op_first)),
        "MatmulDescSetAttribute(TRANSA)");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                       sizeof(op_second)),
        "MatmulDescSetAttribute(TRANSB)");
  // Stored shapes (row-major): B is [N, K] when transposed else [K, N]; A is [K, M] or [M, K].
  const i64 b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const i64 a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  check(cublasLtMatrixLayoutCreate(&p.a, ab, static_cast<std::uint64_t>(b_cols),
                                   static_cast<std::uint64_t>(b_rows), ldb),
        "MatrixLayoutCreate(B)");
  check(cublasLtMatrixLayoutCreate(&p.b, ab, static_cast<std::uint64_t>(a_cols),
                                   static_cast<std::uint64_t>(a_rows), lda),
        "MatrixLayoutCreate(A)");
  check(cublasLtMatrixLayoutCreate(&p.c, ct, static_cast<std::uint64_t>(N),
                                   static_cast<std::uint64_t>(M), ldc),
        "MatrixLayoutCreate(C)");

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate");
  const std::uint64_t ws = workspace_bytes_;
  const std::uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE;
  const std::uint32_t align_bytes = static_cast<std::uint32_t>(align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                       &no_split_k, sizeof(no_split_k));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_bytes, sizeof(align_bytes));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  cublasStatus_t rc =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &count);
  if (rc == CUBLAS_STATUS_SUCCESS && count == 0) {
    // No kernel without split-K for this shape: allow cuBLASLt's split-K schemes, which reduce
    // in a fixed order too (in place with ordering counters, or in a separate reduction kernel).
    const std::uint32_t any = CUBLASLT_REDUCTION_SCHEME_MASK;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any,
                                         sizeof(any));
    rc = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result,
                                        &count);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (rc != CUBLAS_STATUS_SUCCESS || count == 0) {
    core::fail(
        "cuBLASLt has no algorithm for a {} gemm {}{} x {}{} -> [{}, {}] (lda {} ldb {} "
        "ldc {}, alignment {} bytes): {}",
        ab == CUDA_R_32F ? "fp32" : "bf16", trans_a ? "A^T" : "A", fmt::format("[{}, {}]", M, K),
        trans_b ? "B^T" : "B", fmt::format("[{}, {}]", K, N), M, N, lda, ldb, ldc, align,
        cublasLtGetStatusString(rc));
  }
  p.algo = result.algo;
  (void)beta_zero;
  return plans_.emplace(key, p).first->second;
}

void LtGemm::run(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const void* A,
                 i64 lda, const void* B, i64 ldb, Elem ab, float beta, void* C, i64 ldc, Elem c) {
  if (M == 0 || N == 0) return;
  const Key key{trans_a,
                trans_b,
                M,
                N,
                K,
                lda,
                ldb,
                ldc,
                static_cast<int>(ab),
                static_cast<int>(c),
                alignment(A, B, C),
                beta == 0.0f};
  const Plan& p = plan(key);
  check(cublasLtMatmul(handle_, p.desc, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                       workspace_, workspace_bytes_, stream_),
        "Matmul");
}

}  // namespace tandem::kernels::cuda
