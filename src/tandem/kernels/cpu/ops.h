// CPU kernels, fp32, one forward/backward pair per op. Layouts are row-major and contiguous.
// Model code calls only these (never loops over raw memory itself), so a CUDA backend with the
// same signatures can slot in beside this one.
//
// Determinism: every kernel gives bit-identical results for a given OMP thread count (static
// work partitioning, fixed reduction order, no atomics on floats).
// Gradient outputs documented as "accumulate" are added to (+=); others are overwritten.
#pragma once

#include <cstdint>

#include "tandem/kernels/adamw_arithmetic.h"

namespace tandem::kernels::cpu {

using i64 = std::int64_t;

// C[M,N] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. Row-major, leading dims given.
void gemm(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
          const float* B, i64 ldb, float beta, float* C, i64 ldc);

// Linear without bias: y[T,out] = x[T,in] * W[out,in]^T.
void linear_forward(const float* x, const float* w, float* y, i64 T, i64 in, i64 out);
// dx[T,in] = dy * W (overwritten, or += if accumulate_dx); dw[out,in] += dy^T * x.
// dx or dw may be null to skip that gradient.
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, i64 T,
                     i64 in, i64 out, bool accumulate_dx);

// out[T,d] = table[ids[t], :]. Throws tandem::core::Error if an id is outside [0, vocab).
void embedding_forward(const std::int64_t* ids, const float* table, float* out, i64 T, i64 d,
                       i64 vocab);
// The same lookup of bf16 rows (16-bit values copied as they are).
void embedding_forward(const std::int64_t* ids, const std::uint16_t* table, std::uint16_t* out,
                       i64 T, i64 d, i64 vocab);
// fp32 rows rounded to bf16 as they are looked up: the same bits as a lookup in the table cast to
// bf16, without a bf16 copy of the whole table.
void embedding_forward(const std::int64_t* ids, const float* table, std::uint16_t* out, i64 T,
                       i64 d, i64 vocab);
// dtable[ids[t], :] += dout[t, :] (accumulate; deterministic: rows summed in order of t). An id
// outside [0, vocab) is an error raised before anything is added.
void embedding_backward(const std::int64_t* ids, const float* dout, float* dtable, i64 T, i64 d,
                        i64 vocab);

// RMSNorm over rows of width d: y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), computed in
// fp32 with the weight applied last (HF order). rstd[rows] is saved for backward.
// QK-norm is this op with d = heads * head_dim (one norm over the whole projection).
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, i64 rows, i64 d,
                     float eps);
// dx[rows,d] overwritten; dw[d] accumulate.
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                      float* dw, i64 rows, i64 d);

// RoPE, NeoX "rotate_half" layout (kernels/rope_table.h), in place on x[B, T, H, D] with cos/sin
// tables of [P, D/2]. Token (b, t) is at position positions[b * T + t], or at t when positions is
// null (each sequence starts at 0); positions must lie in [0, P).
void rope_forward(float* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
                  const std::int64_t* positions = nullptr);
// In place on the gradient: applies the inverse rotation (transpose of forward).
void rope_backward(float* dx, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
                   const std::int64_t* positions = nullptr);

// Causal attention with an optional sliding window, GQA and optional intra-document masking.
// q[B,T,Hq,D], k,v[B,T,Hkv,D], out[B,T,Hq,D]; query head h uses kv head h / (Hq / Hkv).
// Key j is visible to query i iff j <= i and (window <= 0 or i - window < j) and, when doc_start is
// given, j >= doc_start[b * T + i]: doc_start[B*T] holds, for every token, the position in its row
// where its document begins (non-decreasing along a row, doc_start <= position), so no query sees
// a key of an earlier document (OLMo-core's doc_lens / cu_doc_lens). Scores are scaled by
// `scale`. Tiled with an online softmax: memory is O(tile * window), never O(T^2).
// lse[B,Hq,T] (log-sum-exp of the scaled scores) is saved for backward.
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                       const std::int64_t* doc_start = nullptr);
// dq, dk, dv overwritten. doc_start as in the forward pass.
void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, i64 B,
                        i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                        const std::int64_t* doc_start = nullptr);

// SwiGLU gate: h = silu(g) * u elementwise over n values.
void swiglu_forward(const float* g, const float* u, float* h, i64 n);
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, i64 n);

// y = a + b (y may alias a or b).
void add(const float* a, const float* b, float* y, i64 n);
// x *= factor.
void scale(float* x, float factor, i64 n);
// dst[i, :] = src[index[i], :] for rows of width d (index checked against src_rows).
void gather_rows(const float* src, i64 src_rows, i64 d, const std::int64_t* index, i64 n,
                 float* dst);
void gather_rows(const std::uint16_t* src, i64 src_rows, i64 d, const std::int64_t* index, i64 n,
                 std::uint16_t* dst);

// Fused lm_head + cross-entropy + z-loss over hidden[N,d] and W[V,d] (logits = hidden * W^T),
// labels[N] in [0,V) or core::kIgnoreIndex (-100, ignored). Works through the tokens in chunks so
// the full [N, V] logits never exist at once. Sums over non-ignored tokens:
//   ce_sum = sum(logsumexp(logits) - logits[label]), z_sum = sum(logsumexp(logits)^2).
// The loss being differentiated is grad_scale * (ce_sum + z_weight * z_sum); if dhidden/dw are
// non-null its gradients are written to dhidden[N,d] (overwritten) and added to dw[V,d].
struct CrossEntropyResult {
  double ce_sum = 0.0;
  double z_sum = 0.0;
  i64 count = 0;  // non-ignored labels
};
CrossEntropyResult lm_head_cross_entropy(const float* hidden, const float* w,
                                         const std::int64_t* labels, i64 N, i64 d, i64 V,
                                         float z_weight, float grad_scale, float* dhidden,
                                         float* dw);
// The bf16 variant (hidden, w, dhidden bf16; dw fp32): bf16 GEMMs with fp32 accumulation, logits
// rounded to bf16 as a bf16 lm_head produces them, then the same fp32/double loss; the logits'
// gradient is rounded to bf16 for the two gradient GEMMs (as autograd of a bf16 model does).
CrossEntropyResult lm_head_cross_entropy(const std::uint16_t* hidden, const std::uint16_t* w,
                                         const std::int64_t* labels, i64 N, i64 d, i64 V,
                                         float z_weight, float grad_scale, std::uint16_t* dhidden,
                                         float* dw);

// out[i] = log_softmax(logits[i, :])[targets[i]] in double (downstream scoring).
void token_log_probs(const float* logits, const std::int64_t* targets, i64 n, i64 V, double* out);

// Sum of squares in double over fixed 16K-element chunks added in index order: the result does not
// depend on the thread count.
double sum_of_squares(const float* x, i64 n);

// One AdamW update per element, in `arithmetic`'s operations; compiled without FMA contraction so
// that the fused multiply-adds are exactly the reference's.
struct AdamWConstants {
  float neg_step_size, bias_correction2_sqrt, decay_factor, beta1, one_minus_beta1, beta2,
      one_minus_beta2, eps;
  bool decay;
  AdamWArithmetic arithmetic;
};
void adamw_update(float* p, const float* g, float* m, float* v, i64 n, const AdamWConstants& c);

}  // namespace tandem::kernels::cpu
