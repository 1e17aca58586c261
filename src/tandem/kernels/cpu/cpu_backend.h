// The CPU backend: host memory (64-byte aligned), the kernels of kernels/cpu/ops.h (OpenMP,
// oneDNN sgemm, AVX2/AVX-512 through the compiler), deterministic for a given thread count.
#pragma once

#include <vector>

#include "tandem/kernels/backend.h"

namespace tandem::kernels {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  bool host_accessible() const override { return true; }
  double peak_flops(DType dtype) const override;
  std::string describe_peak(DType dtype) const override;

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
  void do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const AdamWScalars& s) override;

 private:
  // bf16 tensors run the fp32 kernels on converted copies (kernels/cpu/bf16.h for GEMMs).
  const float* in(const Tensor& t, int slot);
  float* out(const Tensor& t, int slot, bool keep_contents);
  void store(const Tensor& t, const float* values);
  float* scratch(int slot, std::int64_t n);
  std::vector<std::vector<float>> scratch_;
};

}  // namespace tandem::kernels
