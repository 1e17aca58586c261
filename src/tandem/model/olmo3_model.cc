#include "tandem/model/olmo3_model.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

namespace k = kernels::cpu;

std::vector<std::int64_t> shifted_labels(const std::int64_t* ids, std::int64_t B, std::int64_t T) {
  std::vector<std::int64_t> labels(static_cast<std::size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t + 1 < T; ++t) labels[b * T + t] = ids[b * T + t + 1];
    labels[b * T + T - 1] = k::kIgnoreIndex;
  }
  return labels;
}

k::RopeFrequencies rope_frequencies(const RopeConfig& r, std::int64_t head_dim) {
  if (r.type == "linear") return k::rope_linear_frequencies(head_dim, r.theta, r.factor);
  if (r.type != "yarn") return k::rope_default_frequencies(head_dim, r.theta);
  k::YarnParameters p;
  p.factor = r.factor;
  p.original_max_positions = r.original_max_position_embeddings;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.attention_factor = r.attention_factor;
  p.truncate = r.truncate;
  p.formula = r.olmo_core_formula ? k::YarnFormula::kOlmoCore : k::YarnFormula::kTransformers;
  return k::rope_yarn_frequencies(head_dim, r.theta, p);
}

Olmo3Model::Olmo3Model(ModelConfig config)
    : config_(std::move(config)),
      layout_(config_),
      params_(static_cast<std::size_t>(layout_.total()), 0.0f),
      grads_(static_cast<std::size_t>(layout_.total()), 0.0f),
      acts_(static_cast<std::size_t>(config_.n_layers)) {
  config_.validate();
}

void Olmo3Model::ensure_rope_tables(std::int64_t T) {
  if (rope_full_.max_positions >= T && rope_sliding_.max_positions >= T) return;
  const std::int64_t D = config_.head_dim;
  rope_full_ = k::make_rope_table(T, D, rope_frequencies(config_.full_attention_rope, D));
  rope_sliding_ = k::make_rope_table(T, D, rope_frequencies(config_.sliding_attention_rope, D));
}

void Olmo3Model::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Olmo3Model::init_weights(std::uint64_t seed) {
  init_parameters(layout_, config_.init_std, seed, params_.data());
}

void Olmo3Model::resize(std::int64_t B, std::int64_t T) {
  TANDEM_CHECK(config_.accepts_sequence_length(T),
               "sequence length {} exceeds the model's max_sequence_length {}", T,
               config_.max_sequence_length);
  ensure_rope_tables(T);
  const std::int64_t N = B * T;
  if (N == cached_tokens_) return;
  const auto n = static_cast<std::size_t>(N);
  const auto d = static_cast<std::size_t>(config_.d_model);
  const auto qw = static_cast<std::size_t>(config_.q_width());
  const auto kw = static_cast<std::size_t>(config_.kv_width());
  const auto hid = static_cast<std::size_t>(config_.hidden_size);
  for (auto& a : acts_) {
    a.x.resize(n * d);
    a.q_pre.resize(n * qw);
    a.k_pre.resize(n * kw);
    a.q_rstd.resize(n);
    a.k_rstd.resize(n);
    a.q.resize(n * qw);
    a.k.resize(n * kw);
    a.v.resize(n * kw);
    a.attn.resize(n * qw);
    a.lse.resize(static_cast<std::size_t>(config_.n_heads) * n);
    a.o.resize(n * d);
    a.o_rstd.resize(n);
    a.h.resize(n * d);
    a.g.resize(n * hid);
    a.u.resize(n * hid);
    a.m.resize(n * hid);
    a.f.resize(n * d);
    a.f_rstd.resize(n);
  }
  final_in_.resize(n * d);
  final_rstd_.resize(n);
  final_normed_.resize(n * d);
  scratch_d_.resize(n * d);
  scratch_q_.resize(n * qw);
  scratch_q2_.resize(n * qw);
  scratch_kv_.resize(n * kw);
  scratch_kv2_.resize(n * kw);
  scratch_h_.resize(n * hid);
  scratch_h2_.resize(n * hid);
  grad_d_.resize(n * d);
  grad_d2_.resize(n * d);
  cached_tokens_ = N;
}

void Olmo3Model::forward_layer(std::int64_t l, const float* x, float* out, std::int64_t B,
                               std::int64_t T) {
  LayerActivations& a = acts_[static_cast<std::size_t>(l)];
  const ModelConfig& c = config_;
  const std::int64_t N = B * T, d = c.d_model, qw = c.q_width(), kw = c.kv_width();
  std::copy(x, x + N * d, a.x.begin());

  k::linear_forward(x, param(block_param(l, "attention.w_q.weight")), a.q_pre.data(), N, d, qw);
  k::linear_forward(x, param(block_param(l, "attention.w_k.weight")), a.k_pre.data(), N, d, kw);
  k::linear_forward(x, param(block_param(l, "attention.w_v.weight")), a.v.data(), N, d, kw);
  const float eps = static_cast<float>(c.layer_norm_eps);
  k::rmsnorm_forward(a.q_pre.data(), param(block_param(l, "attention.q_norm.weight")), a.q.data(),
                     a.q_rstd.data(), N, qw, eps);
  k::rmsnorm_forward(a.k_pre.data(), param(block_param(l, "attention.k_norm.weight")), a.k.data(),
                     a.k_rstd.data(), N, kw, eps);
  const std::int64_t* pos = doc_start_ ? positions_.data() : nullptr;
  k::rope_forward(a.q.data(), B, T, c.n_heads, c.head_dim, rope_of_layer(l), pos);
  k::rope_forward(a.k.data(), B, T, c.n_kv_heads, c.head_dim, rope_of_layer(l), pos);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  k::attention_forward(a.q.data(), a.k.data(), a.v.data(), a.attn.data(), a.lse.data(), B, T,
                       c.n_heads, c.n_kv_heads, c.head_dim, c.layer_windows[l], scale, doc_start_);
  k::linear_forward(a.attn.data(), param(block_param(l, "attention.w_out.weight")), a.o.data(), N,
                    qw, d);
  k::rmsnorm_forward(a.o.data(), param(block_param(l, "attention_norm.weight")), scratch_d_.data(),
                     a.o_rstd.data(), N, d, eps);
  k::add(x, scratch_d_.data(), a.h.data(), N * d);

  const std::int64_t hid = c.hidden_size;
  k::linear_forward(a.h.data(), param(block_param(l, "feed_forward.w1.weight")), a.g.data(), N, d,
                    hid);
  k::linear_forward(a.h.data(), param(block_param(l, "feed_forward.w3.weight")), a.u.data(), N, d,
                    hid);
  k::swiglu_forward(a.g.data(), a.u.data(), a.m.data(), N * hid);
  k::linear_forward(a.m.data(), param(block_param(l, "feed_forward.w2.weight")), a.f.data(), N, hid,
                    d);
  k::rmsnorm_forward(a.f.data(), param(block_param(l, "feed_forward_norm.weight")),
                     scratch_d_.data(), a.f_rstd.data(), N, d, eps);
  k::add(a.h.data(), scratch_d_.data(), out, N * d);
}

// On entry `dx` holds dL/d(out of layer l); on exit dL/d(input of layer l).
void Olmo3Model::backward_layer(std::int64_t l, float* dx, std::int64_t B, std::int64_t T) {
  LayerActivations& a = acts_[static_cast<std::size_t>(l)];
  const ModelConfig& c = config_;
  const std::int64_t N = B * T, d = c.d_model, qw = c.q_width(), kw = c.kv_width();
  const std::int64_t hid = c.hidden_size;

  // out = h + norm_ffn(f): dh = dout + d(mlp path).
  float* df = scratch_d_.data();
  k::rmsnorm_backward(a.f.data(), param(block_param(l, "feed_forward_norm.weight")),
                      a.f_rstd.data(), dx, df, grad(block_param(l, "feed_forward_norm.weight")), N,
                      d);
  float* dm = scratch_h_.data();
  k::linear_backward(a.m.data(), param(block_param(l, "feed_forward.w2.weight")), df, dm,
                     grad(block_param(l, "feed_forward.w2.weight")), N, hid, d, false);
  float* dg = scratch_h2_.data();
  float* du = a.m.data();  // m is no longer needed: reuse it for du
  k::swiglu_backward(a.g.data(), a.u.data(), dm, dg, du, N * hid);
  // dx (= dout) accumulates the MLP input gradients, becoming dh.
  k::linear_backward(a.h.data(), param(block_param(l, "feed_forward.w1.weight")), dg, dx,
                     grad(block_param(l, "feed_forward.w1.weight")), N, d, hid, true);
  k::linear_backward(a.h.data(), param(block_param(l, "feed_forward.w3.weight")), du, dx,
                     grad(block_param(l, "feed_forward.w3.weight")), N, d, hid, true);

  // h = x + norm_attn(o): dx = dh + d(attention path).
  float* d_o = scratch_d_.data();
  k::rmsnorm_backward(a.o.data(), param(block_param(l, "attention_norm.weight")), a.o_rstd.data(),
                      dx, d_o, grad(block_param(l, "attention_norm.weight")), N, d);
  float* dattn = scratch_q_.data();
  k::linear_backward(a.attn.data(), param(block_param(l, "attention.w_out.weight")), d_o, dattn,
                     grad(block_param(l, "attention.w_out.weight")), N, qw, d, false);
  float* dq = scratch_q2_.data();
  float* dk = scratch_kv_.data();
  float* dv = scratch_kv2_.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  k::attention_backward(a.q.data(), a.k.data(), a.v.data(), a.attn.data(), a.lse.data(), dattn, dq,
                        dk, dv, B, T, c.n_heads, c.n_kv_heads, c.head_dim, c.layer_windows[l],
                        scale, doc_start_);
  const std::int64_t* pos = doc_start_ ? positions_.data() : nullptr;
  k::rope_backward(dq, B, T, c.n_heads, c.head_dim, rope_of_layer(l), pos);
  k::rope_backward(dk, B, T, c.n_kv_heads, c.head_dim, rope_of_layer(l), pos);
  float* dq_pre = scratch_q_.data();
  k::rmsnorm_backward(a.q_pre.data(), param(block_param(l, "attention.q_norm.weight")),
                      a.q_rstd.data(), dq, dq_pre, grad(block_param(l, "attention.q_norm.weight")),
                      N, qw);
  float* dk_pre = a.k.data();  // k no longer needed
  k::rmsnorm_backward(a.k_pre.data(), param(block_param(l, "attention.k_norm.weight")),
                      a.k_rstd.data(), dk, dk_pre, grad(block_param(l, "attention.k_norm.weight")),
                      N, kw);
  k::linear_backward(a.x.data(), param(block_param(l, "attention.w_q.weight")), dq_pre, dx,
                     grad(block_param(l, "attention.w_q.weight")), N, d, qw, true);
  k::linear_backward(a.x.data(), param(block_param(l, "attention.w_k.weight")), dk_pre, dx,
                     grad(block_param(l, "attention.w_k.weight")), N, d, kw, true);
  k::linear_backward(a.x.data(), param(block_param(l, "attention.w_v.weight")), dv, dx,
                     grad(block_param(l, "attention.w_v.weight")), N, d, kw, true);
}

void Olmo3Model::forward_hidden(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                const std::int64_t* doc_start) {
  resize(B, T);
  const std::int64_t N = B * T, d = config_.d_model;
  doc_start_ = doc_start;
  if (doc_start) {
    // OLMo-core's intra-document RoPE: a token's position counts from its document's start.
    positions_.resize(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) positions_[i] = i % T - doc_start[i];
  }
  // Activations flow through two scratch buffers; each layer also keeps its own input copy.
  float* cur = grad_d2_.data();
  float* next = grad_d_.data();
  k::embedding_forward(ids, param("embeddings.weight"), cur, N, d, config_.embedding_size);
  for (std::int64_t l = 0; l < config_.n_layers; ++l) {
    float* out = (l + 1 == config_.n_layers) ? final_in_.data() : next;
    forward_layer(l, cur, out, B, T);
    std::swap(cur, next);
  }
  if (config_.n_layers == 0) std::copy(cur, cur + N * d, final_in_.begin());
  k::rmsnorm_forward(final_in_.data(), param("lm_head.norm.weight"), final_normed_.data(),
                     final_rstd_.data(), N, d, static_cast<float>(config_.layer_norm_eps));
}

void Olmo3Model::forward_logits(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                float* logits, const std::int64_t* doc_start) {
  forward_hidden(ids, B, T, doc_start);
  k::linear_forward(final_normed_.data(), param("lm_head.w_out.weight"), logits, B * T,
                    config_.d_model, config_.embedding_size);
}

void Olmo3Model::forward_logits_at(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                   std::span<const std::int64_t> positions, float* logits,
                                   const std::int64_t* doc_start) {
  forward_hidden(ids, B, T, doc_start);
  const std::int64_t d = config_.d_model, n = static_cast<std::int64_t>(positions.size());
  std::vector<float> rows(static_cast<std::size_t>(n * d));
  for (std::int64_t i = 0; i < n; ++i) {
    TANDEM_CHECK(positions[i] >= 0 && positions[i] < B * T,
                 "forward_logits_at: position {} outside [0, {})", positions[i], B * T);
    std::copy_n(final_normed_.data() + positions[i] * d, d, rows.data() + i * d);
  }
  k::linear_forward(rows.data(), param("lm_head.w_out.weight"), logits, n, d,
                    config_.embedding_size);
}

LossSums Olmo3Model::forward_backward(const std::int64_t* ids, const std::int64_t* labels,
                                      std::int64_t B, std::int64_t T, float z_weight,
                                      float grad_scale, bool backward,
                                      const std::int64_t* doc_start) {
  forward_hidden(ids, B, T, doc_start);
  const std::int64_t N = B * T, d = config_.d_model;
  float* dx = backward ? grad_d_.data() : nullptr;
  k::CrossEntropyResult r = k::lm_head_cross_entropy(
      final_normed_.data(), param("lm_head.w_out.weight"), labels, N, d, config_.embedding_size,
      z_weight, grad_scale, dx, backward ? grad("lm_head.w_out.weight") : nullptr);
  LossSums sums{r.ce_sum, r.z_sum, r.count};
  if (!backward) return sums;

  float* dfinal = grad_d2_.data();
  k::rmsnorm_backward(final_in_.data(), param("lm_head.norm.weight"), final_rstd_.data(), dx,
                      dfinal, grad("lm_head.norm.weight"), N, d);
  for (std::int64_t l = config_.n_layers - 1; l >= 0; --l) backward_layer(l, dfinal, B, T);
  k::embedding_backward(ids, dfinal, grad("embeddings.weight"), N, d);
  return sums;
}

}  // namespace tandem
