// The CUDA kernels' launchers: plain C++ declarations over raw device pointers, so that the
// backend (cuda_backend.cc, compiled by the host compiler) never sees device code and each .cu
// file stays small. Every launcher enqueues on the given stream and returns at once; sizes are
// checked by the Backend interface before they get here. Elementwise and row kernels take an
// `Elem` and are instantiated for fp32 and bf16 storage (arithmetic is always fp32 or wider).
//
// Determinism: no kernel uses floating-point atomics; every reduction has a fixed shape and order
// (warp shuffles in a fixed butterfly, block trees, partial sums added in index order), so a
// launch repeated on the same GPU gives the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tandem/kernels/adamw_arithmetic.h"

namespace tandem::kernels::cuda {

using i64 = std::int64_t;

// Storage type of an activation tensor.
enum class Elem : int { f32 = 0, bf16 = 1 };

// Set (first writer wins) by a kernel that meets an index outside its range; the backend reads it
// back at its next synchronisation point and raises the error there.
struct DeviceError {
  int code;
  int unused;
  long long value;  // the offending index
  long long where;  // its position
};
enum DeviceErrorCode : int {
  kNoError = 0,
  kBadEmbeddingId = 1,
  kBadRopePosition = 2,
  kBadDocStart = 3,
  kBadGatherIndex = 4,
};

// ---- elementwise (elementwise.cu) ----
void fill(float* dst, float value, i64 n, cudaStream_t stream);
void scale(float* x, float factor, i64 n, cudaStream_t stream);
void add(Elem t, const void* a, const void* b, void* y, i64 n, cudaStream_t stream);
void swiglu_forward(Elem t, const void* g, const void* u, void* h, i64 n, cudaStream_t stream);
void swiglu_backward(Elem t, const void* g, const void* u, const void* dh, void* dg, void* du,
                     i64 n, cudaStream_t stream);
// dst[i, :] = src[index[i], :], rows of width d; an index outside [0, src_rows) sets the error.
void gather_rows(Elem t, const void* src, i64 src_rows, i64 d, const i64* index, i64 n, void* dst,
                 DeviceError* error, cudaStream_t stream);
// f32 -> bf16 (round to nearest even with torch's bits, every NaN -> 0xFFFF) or bf16 -> f32
// (exact); the same type is a copy.
void cast(Elem from, Elem to, const void* src, void* dst, i64 n, cudaStream_t stream);

// ---- embedding (embedding.cu) ----
// The table is f32 or bf16; out has the table's type, or is bf16 from an f32 table (each value
// rounded as it is looked up, the bits of a lookup in the table cast to bf16).
void embedding_forward(Elem table_t, Elem out_t, const i64* ids, const void* table, void* out,
                       i64 T, i64 d, i64 V, DeviceError* error, cudaStream_t stream);
// dtable[id, :] += sum of dout rows with that id, added in token order (the CPU kernel's order):
// the token indices are stably sorted by id on the device (integer radix passes through
// `scratch`, embedding_backward_scratch_bytes(T) of scratch_sizes.h), then one block per distinct
// id and column chunk adds its rows. An id outside [0, V) sets the error and adds nothing.
// dout is f32 or bf16 (`dout_t`), the table's gradient always f32. T and V below 2^31 - 1.
void embedding_backward(Elem dout_t, const i64* ids, const void* dout, float* dtable, i64 T, i64 d,
                        i64 V, void* scratch, DeviceError* error, cudaStream_t stream);

// ---- RMSNorm (rmsnorm.cu) ----
// x, w, y (and dy, dx) share the storage type `t`; rstd and dw are f32.
void rmsnorm_forward(Elem t, const void* x, const void* w, void* y, float* rstd, i64 rows, i64 d,
                     float eps, cudaStream_t stream);
// dx overwritten; dw (optional) accumulated through `partials` (rmsnorm_dw_partials(rows, d)
// doubles of scratch).
std::size_t rmsnorm_dw_partials(i64 rows, i64 d);
void rmsnorm_backward(Elem t, const void* x, const void* w, const float* rstd, const void* dy,
                      void* dx, float* dw, i64 rows, i64 d, double* partials, cudaStream_t stream);

// ---- RoPE (rope.cu): sign +1 forward rotation, -1 its inverse ----
void rope(Elem t, void* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
          i64 table_rows, const i64* positions, float sign, DeviceError* error,
          cudaStream_t stream);

// ---- attention (attention.cu): the plain deterministic kernels ----
// Checks doc_start (each in [0, t], non-decreasing along a row) and sets the error otherwise.
void check_doc_start(const i64* doc_start, i64 B, i64 T, DeviceError* error, cudaStream_t stream);
// Largest head_dim the plain kernels take.
constexpr i64 kMaxHeadDim = 256;
void attention_forward(Elem t, const void* q, const void* k, const void* v, void* out, float* lse,
                       i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                       const i64* doc_start, cudaStream_t stream);
// delta: B * Hq * T floats of scratch.
void attention_backward(Elem t, const void* q, const void* k, const void* v, const void* out,
                        const float* lse, const void* dout, void* dq, void* dk, void* dv, i64 B,
                        i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                        const i64* doc_start, float* delta, cudaStream_t stream);
// delta[b, h, i] = sum_c out[b, i, h, c] * dout[b, i, h, c] (B * Hq * T floats), in fp32.
void attention_delta(Elem t, const void* out, const void* dout, float* delta, i64 B, i64 T, i64 Hq,
                     i64 D, cudaStream_t stream);

// ---- attention (attention_flash.cu): tensor-core kernels for bf16 ----
// Same interface and saved lse as the plain kernels, bf16 tensors only, head_dim up to 128; P
// (and in the backward dS) rounded to bf16 before their products, as cuDNN's fused SDPA does.
constexpr i64 kFlashMaxHeadDim = 128;
bool flash_attention_supports(i64 head_dim);
void flash_attention_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                             i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                             const i64* doc_start, cudaStream_t stream);
// delta: B * Hq * T floats of scratch, as for attention_backward.
void flash_attention_backward(const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                              const i64* doc_start, float* delta, cudaStream_t stream);

// ---- losses (cross_entropy.cu) ----
// One chunk of the fused lm_head + CE + z-loss, in place on logits[rows, V] (fp32 or bf16, `t`):
// per row row_ce = lse - logit[label] and row_z = lse^2 (0 for ignored rows, label =
// ignore_index), and, when want_grads, the row becomes grad_scale * (softmax * (1 + 2 z lse) -
// onehot) (zero for ignored rows), rounded once to bf16 for bf16 logits (the bf16 lm_head's output
// as cuBLASLt rounded it: kernels/cpu/cross_entropy.cc's bf16 variant).
void cross_entropy_rows(Elem t, void* logits, const i64* labels, i64 rows, i64 V, i64 ignore_index,
                        float z_weight, float grad_scale, bool want_grads, double* row_ce,
                        double* row_z, cudaStream_t stream);
// out[i] = log_softmax(logits[i, :])[targets[i]] in double; logits f32 or bf16 (`t`).
void token_log_probs(Elem t, const void* logits, const i64* targets, i64 n, i64 V, double* out,
                     cudaStream_t stream);

// ---- optimiser (optimizer.cu) ----
// The CPU's chunking (kernels/cpu/optimizer_ops.cc): one double per 16K-element chunk, each the
// sum of 8 lane accumulators in order, with the CPU's exact operations; the host adds them in
// chunk order, so the result equals the CPU's bit for bit. Every tensor of the device table
// `tensors` (count entries, its chunks from first_chunk, `chunks` in all) in one launch:
// partials[first_chunk + c] is chunk c of that tensor.
constexpr i64 kSumOfSquaresChunk = i64{1} << 14;
struct SumOfSquaresTensor {
  const float* x;
  i64 n;
  i64 first_chunk;
};
constexpr i64 sum_of_squares_chunks(i64 n) {
  return (n + kSumOfSquaresChunk - 1) / kSumOfSquaresChunk;
}
void sum_of_squares_tensors(const SumOfSquaresTensor* tensors, int count, i64 chunks,
                            double* partials, cudaStream_t stream);
struct AdamWArgs {
  float neg_step_size, bias_correction2_sqrt, decay_factor, beta1, one_minus_beta1, beta2,
      one_minus_beta2, eps;
  AdamWArithmetic arithmetic;
};
// One tensor of a multi-tensor AdamW update: its operands (f32, n elements each), whether weight
// decay applies, and its first block in the launch (blocks of kAdamWBlockElems elements of one
// tensor, adamw_blocks(n) of them per tensor, in table order).
struct AdamWTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  i64 n;
  i64 first_block;
  int decay;
  int unused;
};
constexpr i64 kAdamWBlockElems = 2048;
constexpr i64 adamw_blocks(i64 n) { return (n + kAdamWBlockElems - 1) / kAdamWBlockElems; }
// AdamW's element update (AdamWArgs::arithmetic: torch's, OLMo-core's foreach or single-tensor)
// with the CPU kernel's exact operations (no contraction but the references' fused multiply-adds),
// so p, m and v equal the CPU's bit for bit, on every tensor of the
// device table `tensors` (count entries, `blocks` blocks in all) in one launch.
void adamw_update_tensors(const AdamWTensor* tensors, int count, i64 blocks, const AdamWArgs& a,
                          cudaStream_t stream);

// The last launch's error (a bad configuration, a missing kernel image), as the runtime says it.
void check_launch(const char* kernel);
// A refused request for more than 48 KB of dynamic shared memory (cudaFuncSetAttribute's `rc`):
// fails with what the kernel asked for and what the device allows per block.
void check_smem_request(cudaError_t rc, const char* kernel, std::size_t bytes);

}  // namespace tandem::kernels::cuda
