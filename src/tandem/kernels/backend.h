// The backend interface (ggml's backend split): a Backend owns device memory and runs every op of
// the model, the optimiser and the scorers as a forward/backward pair over Tensors that carry their
// dtype and shape. The model, optimiser and trainer are written once against this interface;
// kernels/cpu/ implements it on the host (cpu_backend.h), a CUDA backend is the second
// implementation (kernels/cuda/).
//
// Each public op checks dtypes and shapes here, once for every backend, then calls the backend's
// `do_` implementation (non-virtual interface). Conventions: row-major contiguous tensors; an
// output named `d*` documented as "accumulated" is added to, every other output is overwritten; an
// undefined (default) Tensor for an optional output skips it. Every op is deterministic for a
// given backend and thread count (no atomics on floats, fixed reduction orders).
//
// Precision (docs/precision.md): the activations, weights and activation gradients of an op are
// all f32 or all bf16 (the mixed-precision policy); weight gradients (dw, dtable), statistics
// (rstd, lse), losses and the optimiser's tensors are always f32. A bf16 op computes in fp32 (GEMMs
// accumulate in fp32) and rounds each bf16 output once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/adamw_arithmetic.h"
#include "tandem/kernels/op_profile.h"
#include "tandem/kernels/tensor.h"

namespace tandem::kernels {

// Sums over the non-ignored labels of a fused lm_head + cross-entropy + z-loss.
struct LossSums {
  double ce_sum = 0.0;  // sum of logsumexp(logits) - logits[label]
  double z_sum = 0.0;   // sum of logsumexp(logits)^2
  std::int64_t count = 0;
};

// The fp32 scalars of one AdamW update.
struct AdamWScalars {
  AdamWArithmetic arithmetic = AdamWArithmetic::torch_adamw;
  float neg_step_size = 0.0f;  // -(lr / (1 - beta1^t))
  float bias_correction2_sqrt = 1.0f;
  float decay_factor = 1.0f;  // 1 - lr * weight_decay
  float beta1 = 0.0f;         // fp32 1 - (1 - beta1): m's factor, lerp's 1 - w
  float one_minus_beta1 = 0.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 0.0f;
  float eps = 0.0f;
  bool decay = false;  // apply decay_factor to this parameter
};

// One tensor's part of a multi-tensor AdamW update (Backend::adamw_updates): parameter, gradient
// and moments (all f32, the same numel) and whether weight decay applies to it.
struct AdamWRun {
  Tensor p, g, m, v;
  bool decay = false;
};

// Device memory of a backend that manages its own (the CUDA backend's caching allocator): bytes
// handed out and bytes obtained from the driver, now and at their peak, and what the device has
// free and in all (the driver's figures: other programs and the runtime's own use included).
// Zero where not tracked.
struct MemoryStats {
  std::int64_t in_use = 0;
  std::int64_t peak_in_use = 0;
  std::int64_t reserved = 0;
  std::int64_t peak_reserved = 0;
  std::int64_t device_free = 0;
  std::int64_t device_total = 0;
  // A caching device allocator's calls to the driver: allocations it made, and the times it gave
  // its cache back (when the device was full). Both stay put in a steady training step.
  std::int64_t driver_allocations = 0;
  std::int64_t cache_releases = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // A line for logs: the device and the code paths that run ("cpu: 2 threads, AVX2+FMA, oneDNN").
  virtual std::string describe() const = 0;
  // The device's stated dense peak in FLOP/s for matmuls in `dtype` (the MFU denominator): on the
  // CPU from the cores in use, the clock and the FMA width; on a GPU its published figure.
  virtual double peak_flops(DType dtype) const = 0;
  // Where peak_flops comes from, for logs ("2 cores x 2.60 GHz x 64 FLOP/cycle").
  virtual std::string describe_peak(DType dtype) const = 0;

  // ---- memory ----
  // True when the host can read and write this backend's memory directly (the CPU backend).
  virtual bool host_accessible() const = 0;
  Buffer allocate(DType dtype, Shape shape) { return Buffer(this, dtype, shape); }
  // Host -> device: dst.bytes() bytes from `host`.
  void upload(const Tensor& dst, const void* host);
  // Device -> host: src.bytes() bytes into `host`.
  void download(void* host, const Tensor& src);
  void copy(const Tensor& dst, const Tensor& src);  // device -> device, same dtype and numel
  void fill(const Tensor& dst, float value);        // f32 tensors
  void zero(const Tensor& dst);                     // any dtype: all bits zero
  // dst = src converted between f32 and bf16 (round to nearest even, torch's bits); the same
  // dtype is a copy.
  void cast(const Tensor& dst, const Tensor& src);
  // Waits for queued work (a no-op where ops are synchronous).
  virtual void synchronize() {}
  // The device stream this backend queues its work on (a cudaStream_t), so that collectives on
  // its memory can be ordered with that work; null where ops are synchronous host code.
  virtual void* device_stream() const { return nullptr; }
  // Bytes held by this backend's live Buffers, and the most held at once since construction or
  // the last reset_peak_bytes() (what `tandem plan` predicts; kernels' own scratch not included).
  std::int64_t bytes_in_use() const { return bytes_in_use_.load(); }
  std::int64_t peak_bytes() const { return peak_bytes_.load(); }
  void reset_peak_bytes() { peak_bytes_.store(bytes_in_use_.load()); }
  // Device memory counters (zeros where the backend does not track them) and a reset of the peaks.
  virtual MemoryStats memory_stats() const { return {}; }
  virtual void reset_peak_memory() {}
  // Hands the memory the backend keeps cached for reuse back to the device (a no-op elsewhere).
  virtual void release_cached_memory() {}

  // ---- dense algebra ----
  // C = alpha * op(A) * op(B) + beta * C for 2-D f32 tensors, op(X) = X or X^T.
  void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
            const Tensor& c);
  // y[T,out] = x[T,in] * w[out,in]^T.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& y);
  // dx[T,in] = dy * w (or += when accumulate_dx); dw[out,in] += dy^T * x (accumulated).
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                       const Tensor& dw, bool accumulate_dx);

  // ---- embedding ----
  // out[T,d] = table[ids[t]]; ids are i64, checked to lie in [0, V). A bf16 out may read an f32
  // table: each row is rounded as it is looked up (the same bits as a bf16 copy of the table).
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
  // dtable[ids[t]] += dout[t] (accumulated, in order of t).
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

  // ---- normalisation ----
  // RMSNorm over the last dimension of x[rows,d] (fp32 statistics, weight applied last as HF
  // does); rstd[rows] saved for backward. QK-norm is this op over the whole projection width.
  void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                       float eps);
  // dx overwritten; dw[d] accumulated.
  void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                        const Tensor& dx, const Tensor& dw);

  // ---- rotary embedding ----
  // In place on x[B,T,H,D] (NeoX rotate-half layout); cos/sin[P, D/2] (kernels/rope_table.h).
  // Token (b, t) sits at position t, or at positions[b*T + t] (optional i64 [B*T], each in
  // [0, P); intra-document masking restarts positions at each document).
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    const Tensor& positions = {});
  // In place on the gradient (the inverse rotation).
  void rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                     const Tensor& positions = {});

  // ---- attention ----
  // Causal attention, optional sliding window (key j visible to query i iff j <= i and
  // (window <= 0 or i - window < j)), GQA (query head h reads kv head h / (Hq / Hkv)), optional
  // intra-document masking (doc_start i64 [B*T]: where each token's document begins in its row;
  // keys before it are invisible, as OLMo-core's doc_lens).
  // q[B,T,Hq,D], k,v[B,T,Hkv,D], out[B,T,Hq,D], lse[B,Hq,T] saved for backward.
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, std::int64_t window, float scale,
                         const Tensor& doc_start = {});
  // dq, dk, dv overwritten.
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, std::int64_t window, float scale,
                          const Tensor& doc_start = {});

  // ---- elementwise ----
  // h = silu(g) * u.
  void swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h);
  // dg, du overwritten (du may alias u: u is read before du is written, element by element).
  void swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh, const Tensor& dg,
                       const Tensor& du);
  // y = a + b (y may alias a or b).
  void add(const Tensor& a, const Tensor& b, const Tensor& y);
  // x *= factor.
  void scale(const Tensor& x, float factor);
  // dst[i] = src[index[i]] for rows of width src.dim(1); index i64 on the device.
  void gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst);

  // ---- losses and scores ----
  // Fused lm_head + cross-entropy + z-loss over hidden[N,d] and w[V,d] (logits = hidden w^T),
  // labels[N] i64 in [0,V) or core::kIgnoreIndex. The full [N,V] logits never exist at once.
  // The differentiated loss is grad_scale * (ce_sum + z_weight * z_sum): dhidden[N,d] overwritten,
  // dw[V,d] accumulated (both optional).
  LossSums lm_head_cross_entropy(const Tensor& hidden, const Tensor& w, const Tensor& labels,
                                 float z_weight, float grad_scale, const Tensor& dhidden,
                                 const Tensor& dw);
  // log_softmax(logits[n,V])[i, targets[i]] for every row, in double (downstream scoring).
  std::vector<double> token_log_probs(const Tensor& logits, const Tensor& targets);

  // ---- optimiser ----
  // Sum of squares of an f32 tensor in double, in a fixed order that does not depend on the
  // thread count (gradient norms).
  double sum_of_squares(const Tensor& x);
  // sum_of_squares of each tensor, the same values, with at most one wait for the device (a
  // gradient norm over every parameter tensor would otherwise wait once per tensor).
  std::vector<double> sums_of_squares(std::span<const Tensor> xs);
  // One AdamW update of p with gradient g and moments m, v (all f32, same numel).
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                    const AdamWScalars& s);
  // adamw_update of every run with the same scalars (each run's own `decay`), the same values, as
  // one op: the optimiser's update of every parameter tensor in one launch where the backend can
  // (the CUDA backend's multi-tensor kernel) instead of one per tensor.
  void adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s);

  // ---- op profile (op_profile.h) ----
  // From now on every outermost op above (not allocation) is timed by two marks in this backend's
  // work; for one thread's ops (a benchmark's), not a trainer's ops on several threads.
  void start_op_profile();
  // Waits for the work, stops timing and returns the ops' times since start_op_profile().
  OpProfile finish_op_profile();

 protected:
  friend class Buffer;
  // Timing marks: record_mark() marks this point of the backend's work and returns its index;
  // mark_seconds() waits for the work and returns every mark's time in seconds (any origin), then
  // forgets them. Default: the host clock, for backends whose ops run when called.
  virtual std::size_t record_mark();
  virtual std::vector<double> mark_seconds();
  void count_allocation(std::int64_t bytes);  // Buffer: +bytes on allocation, -bytes on release
  virtual void* do_allocate(std::size_t bytes) = 0;
  virtual void do_free(void* data) = 0;
  virtual void do_upload(const Tensor& dst, const void* host) = 0;
  virtual void do_download(void* host, const Tensor& src) = 0;
  virtual void do_copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void do_fill(const Tensor& dst, float value) = 0;
  virtual void do_zero(const Tensor& dst) = 0;
  virtual void do_cast(const Tensor& dst, const Tensor& src) = 0;
  virtual void do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                       float beta, const Tensor& c) = 0;
  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) = 0;
  virtual void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, bool accumulate_dx) = 0;
  virtual void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  virtual void do_embedding_backward(const Tensor& ids, const Tensor& dout,
                                     const Tensor& dtable) = 0;
  virtual void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                  const Tensor& rstd, float eps) = 0;
  virtual void do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                   const Tensor& dy, const Tensor& dx, const Tensor& dw) = 0;
  virtual void do_rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               const Tensor& positions) = 0;
  virtual void do_rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                                const Tensor& positions) = 0;
  virtual void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, std::int64_t window,
                                    float scale, const Tensor& doc_start) = 0;
  virtual void do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const Tensor& dout,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     std::int64_t window, float scale, const Tensor& doc_start) = 0;
  virtual void do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) = 0;
  virtual void do_swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh,
                                  const Tensor& dg, const Tensor& du) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void do_scale(const Tensor& x, float factor) = 0;
  virtual void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) = 0;
  virtual LossSums do_lm_head_cross_entropy(const Tensor& hidden, const Tensor& w,
                                            const Tensor& labels, float z_weight, float grad_scale,
                                            const Tensor& dhidden, const Tensor& dw) = 0;
  virtual std::vector<double> do_token_log_probs(const Tensor& logits, const Tensor& targets) = 0;
  virtual double do_sum_of_squares(const Tensor& x) = 0;
  // Non-empty f32 tensors. Default: do_sum_of_squares of each.
  virtual std::vector<double> do_sums_of_squares(std::span<const Tensor> xs);
  virtual void do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                               const AdamWScalars& s) = 0;
  // Default: do_adamw_update run by run. Runs are non-empty and checked.
  virtual void do_adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s);

 private:
  class OpScope;  // brackets one public op with marks while profiling (backend.cc)
  std::atomic<std::int64_t> bytes_in_use_{0};
  std::atomic<std::int64_t> peak_bytes_{0};
  bool profiling_ = false;
  int op_depth_ = 0;  // public ops running: an op called inside another is the outer one's time
  std::vector<ProfiledCall> profiled_;
  std::vector<double> host_marks_;
};

// The names `backend:` accepts in a config, and the backends built into this binary.
std::vector<std::string> available_backends();
// "cpu" (always), "cuda" (when built with CUDA and a GPU is visible): a clear error otherwise.
std::unique_ptr<Backend> make_backend(const std::string& name);

// Host copies of device tensors, for checkpoints, conversion and tests.
std::vector<float> to_host_f32(Backend& backend, const Tensor& t);
void from_host_f32(Backend& backend, const Tensor& t, const std::vector<float>& host);

}  // namespace tandem::kernels
