#include "tandem/kernels/cpu/bf16.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/cpu_features.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void to_f32(const bf16* src, float* dst, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void to_bf16(const float* src, bf16* dst, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void round_to_bf16(float* x, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

Bf16GemmPath bf16_gemm_path() {
  static const Bf16GemmPath path = [] {
    const char* forced = std::getenv("TANDEM_CPU_BF16_GEMM");
    const bool native = cpu_features().avx512_bf16 || cpu_features().amx_bf16;
    if (forced && std::string(forced) == "fp32") return Bf16GemmPath::kFp32;
    if (forced && std::string(forced) == "onednn") {
      TANDEM_CHECK(native, "TANDEM_CPU_BF16_GEMM=onednn: this CPU has no native bf16 ({})",
                   describe_cpu_features());
      return Bf16GemmPath::kOneDnn;
    }
    TANDEM_CHECK(!forced || std::string(forced).empty(),
                 "TANDEM_CPU_BF16_GEMM must be fp32 or onednn, got '{}'", forced);
    return native ? Bf16GemmPath::kOneDnn : Bf16GemmPath::kFp32;
  }();
  return path;
}

std::string bf16_gemm_path_name() {
  return bf16_gemm_path() == Bf16GemmPath::kOneDnn
             ? "oneDNN bf16 matmul (fp32 accumulation)"
             : "exact conversion to fp32 + fp32 GEMM (no native bf16 on this CPU)";
}

namespace {

// One oneDNN matmul primitive per shape, transposition and beta (creation JITs code: cache it).
struct MatmulKey {
  bool ta, tb;
  std::int64_t M, N, K, lda, ldb, ldc;
  bool accumulate;
  auto tie() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, accumulate); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct MatmulCache {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<MatmulKey, dnnl::matmul> primitives;
  std::mutex mutex;
};

MatmulCache& cache() {
  static MatmulCache c;
  return c;
}

dnnl::memory::desc matrix(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool trans,
                          dnnl::memory::data_type type) {
  // op(X) is rows x cols; X itself is stored row-major with leading dimension ld.
  return trans ? dnnl::memory::desc({rows, cols}, type, {1, ld})
               : dnnl::memory::desc({rows, cols}, type, {ld, 1});
}

void onednn_gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const bf16* A,
                 std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                 std::int64_t ldc) {
  using dt = dnnl::memory::data_type;
  MatmulCache& c = cache();
  const MatmulKey key{ta, tb, M, N, K, lda, ldb, ldc, beta != 0.0f};
  const auto a_md = matrix(M, K, lda, ta, dt::bf16);
  const auto b_md = matrix(K, N, ldb, tb, dt::bf16);
  const auto c_md = matrix(M, N, ldc, false, dt::f32);
  dnnl::matmul prim;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.primitives.find(key);
    if (it == c.primitives.end()) {
      dnnl::primitive_attr attr;
      if (key.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);  // C = op(A) op(B) + C; beta != 1 is applied to C beforehand
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, c.engine);
      it = c.primitives.emplace(key, dnnl::matmul(pd)).first;
    }
    prim = it->second;
  }
  if (beta != 0.0f && beta != 1.0f)
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
  dnnl::stream stream(c.engine);
  dnnl::memory a_mem(a_md, c.engine, const_cast<bf16*>(A));
  dnnl::memory b_mem(b_md, c.engine, const_cast<bf16*>(B));
  dnnl::memory c_mem(c_md, c.engine, C);
  prim.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
}

void fp32_gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const bf16* A,
               std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc) {
  // The stored matrices, converted exactly (rows x ld each).
  const std::int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
  std::vector<float> a(static_cast<std::size_t>(a_rows * lda)),
      b(static_cast<std::size_t>(b_rows * ldb));
  to_f32(A, a.data(), a_rows * lda);
  to_f32(B, b.data(), b_rows * ldb);
  gemm(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta,
               float* C, std::int64_t ldc) {
  TANDEM_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (bf16_gemm_path() == Bf16GemmPath::kOneDnn) {
    try {
      onednn_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
      return;
    } catch (const dnnl::error& e) {
      core::fail("gemm_bf16: oneDNN matmul failed (M={} N={} K={}): {}", M, N, K, e.what());
    }
  }
  fp32_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace tandem::kernels::cpu
