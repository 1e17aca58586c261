// The CUDA emulator's cuBLASLt matmul: D = alpha op(A) op(B) + beta C over column-major layouts,
// written from cuBLASLt's documented semantics. It refuses what cuBLASLt refuses (shapes that do
// not chain, a leading dimension below the row count, type pairs without a kernel, pointers less
// aligned than the algorithm was chosen for) and checks that every operand lies inside one device
// allocation, which is how an out-of-range GEMM in the backend shows up here.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emulator_state.h"

struct cublasLtContext {
  int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  std::uint64_t workspace = 0;
  std::uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  std::uint32_t alignment[4] = {256, 256, 256, 256};
};

namespace {

constexpr std::uint64_t kAlgoMagic = 0x656d756c61746564;  // "emulated"

cublasStatus_t refuse(cublasStatus_t s, const std::string& why) {
  std::fprintf(stderr, "cuBLASLt (CUDA emulator): %s\n", why.c_str());
  return s;
}

std::size_t element_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

float load(const void* p, cudaDataType_t t, std::int64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

void store(void* p, cudaDataType_t t, std::int64_t i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

struct Dims {
  std::uint64_t m, n, k;
};

// The problem's m, n, k, or a refusal: op(A) is m x k, op(B) k x n, C and D m x n.
cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t& desc,
                            const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b,
                            const cublasLtMatrixLayoutOpaque_t& c,
                            const cublasLtMatrixLayoutOpaque_t& d, Dims* dims) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_COMPUTE_32F with fp32 scaling");
  if (desc.transa == CUBLAS_OP_C || desc.transb == CUBLAS_OP_C)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_OP_C of real matrices");
  const std::uint64_t m = desc.transa == CUBLAS_OP_N ? a.rows : a.cols;
  const std::uint64_t k = desc.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const std::uint64_t kb = desc.transb == CUBLAS_OP_N ? b.rows : b.cols;
  const std::uint64_t n = desc.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb || c.rows != m || c.cols != n || d.rows != m || d.cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "shapes do not chain: op(A) " + std::to_string(m) + "x" + std::to_string(k) +
                      ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) + ", C " +
                      std::to_string(c.rows) + "x" + std::to_string(c.cols) + ", D " +
                      std::to_string(d.rows) + "x" + std::to_string(d.cols));
  for (const auto* l : {&a, &b, &c, &d})
    if (l->ld < static_cast<std::int64_t>(l->rows > 0 ? l->rows : 1))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "leading dimension " + std::to_string(l->ld) +
                                                     " below the row count " +
                                                     std::to_string(l->rows));
  const bool ab_ok = a.type == b.type && (a.type == CUDA_R_32F || a.type == CUDA_R_16BF);
  const bool cd_ok = c.type == d.type && (c.type == CUDA_R_32F || c.type == CUDA_R_16BF) &&
                     (a.type == CUDA_R_16BF || c.type == CUDA_R_32F);
  if (!ab_ok || !cd_ok)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no kernel for these operand and output types");
  *dims = Dims{m, n, k};
  return CUBLAS_STATUS_SUCCESS;
}

// Bytes from a layout's first element to one past its last.
std::size_t extent(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<std::uint64_t>(l.ld) + l.rows) * element_bytes(l.type);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
std::size_t cublasLtGetVersion() { return 0; }
const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              std::size_t bytes) {
  if (attr != CUBLASLT_MATMUL_DESC_TRANSA && attr != CUBLASLT_MATMUL_DESC_TRANSB)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a matmul attribute the emulator does not model");
  if (bytes != sizeof(std::int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::int32_t op;
  std::memcpy(&op, buf, sizeof op);
  if (op < CUBLAS_OP_N || op > CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
  (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) =
      static_cast<cublasOperation_t>(op);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(std::uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      if (bytes != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->reduction_mask, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (bytes != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "a preference attribute the emulator does not model");
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* count) {
  *count = 0;
  if (!handle || !desc || !a || !b || !c || !d || !pref || requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  Dims dims;
  if (cublasStatus_t s = check_shapes(*desc, *a, *b, *c, *d, &dims); s != CUBLAS_STATUS_SUCCESS)
    return s;
  // The emulated algorithm needs no split-K and no workspace, so every preference admits it; it
  // requires the alignment the preference promised.
  std::uint32_t align = 256;
  for (std::uint32_t x : pref->alignment) align = x < align ? x : align;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoMagic;
  results[0].algo.data[1] = align;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
  if (!handle || !desc || !a || !b || !c || !d || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  Dims dims;
  if (cublasStatus_t s = check_shapes(*desc, *a, *b, *c, *d, &dims); s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (!algo || algo->data[0] != kAlgoMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm no heuristic returned");
  float alpha_v, beta_v;
  std::memcpy(&alpha_v, alpha, sizeof alpha_v);
  std::memcpy(&beta_v, beta, sizeof beta_v);
  const bool read_c = beta_v != 0.0f;  // with beta = 0, C is not read (it may hold NaN)
  const std::uint64_t align = algo->data[1];
  const struct {
    const void* p;
    const cublasLtMatrixLayoutOpaque_t* l;
    const char* name;
    bool used;
  } operands[] = {
      {A, a, "A", dims.k > 0}, {B, b, "B", dims.k > 0}, {C, c, "C", read_c}, {D, d, "D", true}};
  for (const auto& o : operands) {
    const std::size_t bytes = extent(*o.l);
    if (!o.used || bytes == 0) continue;
    if (reinterpret_cast<std::uintptr_t>(o.p) % align != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string(o.name) + " is less aligned than the " + std::to_string(align) +
                        " bytes the algorithm was chosen for");
    if (!cuda_emulator::detail::device_range(o.p, bytes))
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string(o.name) + " (" + std::to_string(bytes) +
                        " bytes by its layout) is not inside one device allocation");
  }
  if (workspace_bytes > 0 && !cuda_emulator::detail::device_range(workspace, workspace_bytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the workspace is not device memory of its size");

  // Queued on the stream: the operands are read, and D written, when the stream runs. The scalars
  // (host pointer mode) and the descriptors are read now, as cuBLASLt reads them during the call.
  const cublasLtMatmulDescOpaque_t op = *desc;
  const cublasLtMatrixLayoutOpaque_t la = *a, lb = *b, lc = *c, ld_ = *d;
  const cudaError_t queued = cuda_emulator::detail::enqueue(stream, [=] {
    const auto m = static_cast<std::int64_t>(dims.m), n = static_cast<std::int64_t>(dims.n),
               k = static_cast<std::int64_t>(dims.k);
    const bool ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
    // op(A) as m rows of k and op(B) as n columns of k, widened to float, contiguous.
    std::vector<float> rows(static_cast<std::size_t>(m * k)), cols(static_cast<std::size_t>(n * k));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t p = 0; p < k; ++p)
        rows[i * k + p] = load(A, la.type, ta ? p + i * la.ld : i + p * la.ld);
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        cols[j * k + p] = load(B, lb.type, tb ? j + p * lb.ld : p + j * lb.ld);
#pragma omp parallel for schedule(static) if (m * n * k > (1 << 22))
    for (std::int64_t j = 0; j < n; ++j) {
      const float* y = cols.data() + j * k;
      for (std::int64_t i = 0; i < m; ++i) {
        const float* x = rows.data() + i * k;
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        std::int64_t p = 0;
        for (; p + 4 <= k; p += 4)
          for (int u = 0; u < 4; ++u) acc[u] += static_cast<double>(x[p + u]) * y[p + u];
        for (; p < k; ++p) acc[0] += static_cast<double>(x[p]) * y[p];
        double r = static_cast<double>(alpha_v) * ((acc[0] + acc[1]) + (acc[2] + acc[3]));
        if (read_c) r += static_cast<double>(beta_v) * load(C, lc.type, i + j * lc.ld);
        store(D, ld_.type, i + j * ld_.ld, static_cast<float>(r));
      }
    }
  });
  if (queued != cudaSuccess)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the stream does not exist");
  return CUBLAS_STATUS_SUCCESS;
}
