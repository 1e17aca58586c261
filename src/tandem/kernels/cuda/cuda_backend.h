// The CUDA backend: device memory from one caching allocator, GEMMs through cuBLASLt (true fp32
// with TF32 off for fp32 tensors; bf16 tensor cores with fp32 accumulation for bf16), the kernels
// of kernels/cuda/*.cu for everything else, and cuDNN's fused attention for bf16 where it applies
// and is deterministic (attention_cudnn.h). Every op is deterministic on a given GPU. Ops are
// queued on one stream; results that come back to the host (losses, norms, downloads) wait for it.
//
// This header has no CUDA types, so that the rest of tandem compiles without CUDA's headers.
#pragma once

#include <memory>
#include <string>

#include "tandem/kernels/backend.h"

namespace tandem::kernels {

// The number of CUDA devices the runtime sees (0 without a driver or GPU); `why` gets the
// runtime's reason when it is 0.
int cuda_device_count(std::string* why = nullptr);

class CudaBackend final : public Backend {
 public:
  // Uses the current CUDA device (CUDA_VISIBLE_DEVICES / the local rank picks it). Throws a
  // tandem::core::Error when no GPU is visible.
  CudaBackend();
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::string describe() const override;
  bool host_accessible() const override { return false; }
  void* device_stream() const override;
  double peak_flops(DType dtype) const override;
  std::string describe_peak(DType dtype) const override;
  void synchronize() override;
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override;
  void release_cached_memory() override;

  // Whether bf16 attention goes through cuDNN's fused SDPA ("cudnn") or the plain kernels
  // ("plain"), and why; TANDEM_CUDA_ATTENTION=plain forces the plain kernels.
  std::string attention_path() const;

 protected:
  void* do_allocate(std::size_t bytes) override;
  void do_free(void* data) override;
  void do_upload(const Tensor& dst, const void* host) override;
  void do_download(void* host, const Tensor& src) override;
  void do_copy(const Tensor& dst, const Tensor& src) override;
  void do_fill(const Tensor& dst, float value) override;
  void do_zero(const Tensor& dst) override;
  void do_cast(const Tensor& dst, const Tensor& src) override;
  void do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
               float beta, const Tensor& c) override;
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) override;
  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                          const Tensor& dw, bool accumulate_dx) override;
  void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void do_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                          float eps) override;
  void do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                           const Tensor& dx, const Tensor& dw) override;
  void do_rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                       const Tensor& positions) override;
  void do_rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                        const Tensor& positions) override;
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, std::int64_t window, float scale,
                            const Tensor& doc_start) override;
  void do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, std::int64_t window, float scale,
                             const Tensor& doc_start) override;
  void do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) override;
  void do_swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh, const Tensor& dg,
                          const Tensor& du) override;
  void do_add(const Tensor& a, const Tensor& b, const Tensor& y) override;
  void do_scale(const Tensor& x, float factor) override;
  void do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) override;
  LossSums do_lm_head_cross_entropy(const Tensor& hidden, const Tensor& w, const Tensor& labels,
                                    float z_weight, float grad_scale, const Tensor& dhidden,
                                    const Tensor& dw) override;
  std::vector<double> do_token_log_probs(const Tensor& logits, const Tensor& targets) override;
  double do_sum_of_squares(const Tensor& x) override;
  // Every tensor's chunk partials in one launch into one buffer, one copy to the host, each
  // tensor's chunks added in order there: the same values as do_sum_of_squares, one
  // synchronisation.
  std::vector<double> do_sums_of_squares(std::span<const Tensor> xs) override;
  void do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const AdamWScalars& s) override;
  void do_adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s) override;
  // Timing marks are events recorded on the stream: the op profile times the device's work.
  std::size_t record_mark() override;
  std::vector<double> mark_seconds() override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tandem::kernels
