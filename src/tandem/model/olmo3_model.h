// The OLMo 3 (and OLMo 2) decoder, fp32 on CPU: forward to logits or loss, backward to every
// parameter's gradient. Block ("reordered norm", no pre-norm):
//   h   = x + RMSNorm_attn(Attention(x))      q/k: RMSNorm over the whole projection, then RoPE
//   out = h + RMSNorm_ffn(SwiGLU(h))
// then a final RMSNorm and an untied lm_head. All arithmetic goes through kernels/cpu/ops.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/cpu/ops.h"
#include "tandem/model/model_config.h"
#include "tandem/model/parameters.h"

namespace tandem {

struct LossSums {
  double ce_sum = 0.0;  // summed over non-ignored labels
  double z_sum = 0.0;   // sum of logsumexp^2 over non-ignored labels
  std::int64_t count = 0;
};

// The RoPE frequencies (and attention factor) of one attention type's config.
kernels::cpu::RopeFrequencies rope_frequencies(const RopeConfig& rope, std::int64_t head_dim);

// labels[b, t] = ids[b, t + 1], the last position of each row ignored (-100).
std::vector<std::int64_t> shifted_labels(const std::int64_t* ids, std::int64_t B, std::int64_t T);

class Olmo3Model {
 public:
  explicit Olmo3Model(ModelConfig config);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }
  float* param(const std::string& name) { return params_.data() + layout_.entry(name).offset; }
  float* grad(const std::string& name) { return grads_.data() + layout_.entry(name).offset; }
  void zero_grads();
  void init_weights(std::uint64_t seed);

  // Every forward takes an optional doc_start[B*T] (model/documents.h): intra-document masking as
  // OLMo-core's doc_lens, attention kept inside each document and RoPE positions restarting at
  // each document's start. Null = each row is one document.

  // logits[B*T, embedding_size] for ids[B, T] (no activations kept).
  void forward_logits(const std::int64_t* ids, std::int64_t B, std::int64_t T, float* logits,
                      const std::int64_t* doc_start = nullptr);
  // logits[positions.size(), embedding_size] at the given flat positions (b * T + t) only:
  // scoring needs a few positions per sequence, and at small d_model the lm_head is most of the
  // work.
  void forward_logits_at(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                         std::span<const std::int64_t> positions, float* logits,
                         const std::int64_t* doc_start = nullptr);
  // Loss sums over labels[B, T] (-100 = ignored). When `backward`, adds the gradients of
  // grad_scale * (ce_sum + z_weight * z_sum) to grads().
  LossSums forward_backward(const std::int64_t* ids, const std::int64_t* labels, std::int64_t B,
                            std::int64_t T, float z_weight, float grad_scale, bool backward,
                            const std::int64_t* doc_start = nullptr);

 private:
  struct LayerActivations {
    std::vector<float> x, q_pre, k_pre, q_rstd, k_rstd, q, k, v, attn, lse, o, o_rstd, h, g, u, m,
        f, f_rstd;
  };
  void resize(std::int64_t B, std::int64_t T);
  // RoPE tables covering positions [0, T) for both attention types.
  void ensure_rope_tables(std::int64_t T);
  const kernels::cpu::RopeTable& rope_of_layer(std::int64_t l) const {
    return config_.is_full_attention(l) ? rope_full_ : rope_sliding_;
  }
  // Runs the blocks and the final norm; leaves the normed final hidden in final_normed_.
  void forward_hidden(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                      const std::int64_t* doc_start);
  void forward_layer(std::int64_t l, const float* x, float* out, std::int64_t B, std::int64_t T);
  void backward_layer(std::int64_t l, float* dout_dx, std::int64_t B, std::int64_t T);

  ModelConfig config_;
  ParameterLayout layout_;
  std::vector<float> params_;
  std::vector<float> grads_;
  kernels::cpu::RopeTable rope_full_, rope_sliding_;
  // Set by each forward for its backward: the caller's doc_start (null = none) and the RoPE
  // positions derived from it.
  const std::int64_t* doc_start_ = nullptr;
  std::vector<std::int64_t> positions_;
  std::vector<LayerActivations> acts_;
  std::vector<float> final_in_, final_rstd_, final_normed_;
  std::vector<float> scratch_d_, scratch_q_, scratch_q2_, scratch_kv_, scratch_kv2_, scratch_h_,
      scratch_h2_;
  std::vector<float> grad_d_, grad_d2_;
  std::int64_t cached_tokens_ = -1;
};

}  // namespace tandem
