// CPU kernels, fp32, one forward/backward pair per op. Layouts are row-major and contiguous.
// Model code calls only these (never loops over raw memory itself), so a CUDA backend with the
// same signatures can slot in beside this one.
//
// Determinism: every kernel gives bit-identical results for a given OMP thread count (static
// work partitioning, fixed reduction order, no atomics on floats).
// Gradient outputs documented as "accumulate" are added to (+=); others are overwritten.
#pragma once

#include <cstdint>
#include <vector>

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

// out[T,d] = table[ids[t], :]. Throws tandem::Error if an id is outside [0, vocab).
void embedding_forward(const std::int64_t* ids, const float* table, float* out, i64 T, i64 d,
                       i64 vocab);
// dtable[ids[t], :] += dout[t, :] (accumulate; deterministic: rows summed in order of t).
void embedding_backward(const std::int64_t* ids, const float* dout, float* dtable, i64 T, i64 d);

// RMSNorm over rows of width d: y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), computed in
// fp32 with the weight applied last (HF order). rstd[rows] is saved for backward.
// QK-norm is this op with d = heads * head_dim (one norm over the whole projection).
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, i64 rows, i64 d,
                     float eps);
// dx[rows,d] overwritten; dw[d] accumulate.
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                      float* dw, i64 rows, i64 d);

// RoPE, NeoX "rotate_half" layout: for i < D/2, pair (x[i], x[i + D/2]) rotated by angle
// pos * inv_freq[i]. cos/sin tables are [positions, D/2], computed as HF does (fp32 inv_freq, fp32
// product pos * inv_freq, then cos/sin, then times the attention factor in fp32).
//
// The frequencies: plain RoPE has inv_freq[i] = theta^(-2i/D) and attention factor 1; YaRN
// (long-context scaling) blends those with inv_freq / factor along a ramp over the dimensions and
// scales cos/sin by an attention factor (so q.k by its square).
struct RopeFrequencies {
  std::vector<float> inv_freq;  // [D / 2]
  double attention_factor = 1.0;
};
RopeFrequencies rope_default_frequencies(i64 head_dim, double theta);
// Linear position interpolation: the plain frequencies divided by factor (in fp32).
RopeFrequencies rope_linear_frequencies(i64 head_dim, double theta, double factor);
// YaRN as two references compute it; they differ only in rounding-level details and in where the
// ramp's upper end is clamped (transformers: D - 1, OLMo-core: D/2 - 1).
enum class YarnFormula {
  kTransformers,  // transformers' _compute_yarn_parameters
  kOlmoCore,      // OLMo-core's YaRNRoPEScalingConfig.compute_scaled_inv_freq
};
struct YarnParameters {
  double factor = 1.0;             // context extension (>= 1)
  i64 original_max_positions = 0;  // pre-extension context length
  double beta_fast = 32.0;         // ramp start (rotations)
  double beta_slow = 1.0;          // ramp end (rotations)
  double attention_factor = 1.0;   // cos/sin scale, already resolved by the caller
  bool truncate = true;            // floor/ceil the ramp bounds (transformers only)
  YarnFormula formula = YarnFormula::kTransformers;
};
RopeFrequencies rope_yarn_frequencies(i64 head_dim, double theta, const YarnParameters& p);

struct RopeTable {
  i64 max_positions = 0;
  i64 head_dim = 0;
  std::vector<float> cos;  // [max_positions, head_dim / 2]
  std::vector<float> sin;
};
RopeTable make_rope_table(i64 max_positions, i64 head_dim, const RopeFrequencies& frequencies);
// Plain RoPE: make_rope_table(P, D, rope_default_frequencies(D, theta)).
RopeTable make_rope_table(i64 max_positions, i64 head_dim, double theta);
// In place on x[B, T, H, D]. Token (b, t) is at position positions[b * T + t], or at t when
// positions is null (each sequence starts at 0). Positions must lie in [0, table.max_positions).
void rope_forward(float* x, i64 B, i64 T, i64 H, i64 D, const RopeTable& table,
                  const std::int64_t* positions = nullptr);
// In place on the gradient: applies the inverse rotation (transpose of forward).
void rope_backward(float* dx, i64 B, i64 T, i64 H, i64 D, const RopeTable& table,
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

// Fused lm_head + cross-entropy + z-loss over hidden[N,d] and W[V,d] (logits = hidden * W^T),
// labels[N] in [0,V) or -100 (ignored). Works through the tokens in chunks so the full [N, V]
// logits never exist at once. Sums over non-ignored tokens:
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
constexpr std::int64_t kIgnoreIndex = -100;

}  // namespace tandem::kernels::cpu
