#include "tandem/model/olmo3_model.h"

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/model/documents.h"

namespace tandem::model {

using kernels::Buffer;
using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

kernels::RopeFrequencies rope_frequencies(const RopeConfig& r, std::int64_t head_dim) {
  if (r.type == "linear") return kernels::rope_linear_frequencies(head_dim, r.theta, r.factor);
  if (r.type != "yarn") return kernels::rope_default_frequencies(head_dim, r.theta);
  kernels::YarnParameters p;
  p.factor = r.factor;
  p.original_max_positions = r.original_max_position_embeddings;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.attention_factor = r.attention_factor;
  p.truncate = r.truncate;
  p.formula =
      r.olmo_core_formula ? kernels::YarnFormula::kOlmoCore : kernels::YarnFormula::kTransformers;
  return kernels::rope_yarn_frequencies(head_dim, r.theta, p);
}

Olmo3Model::Olmo3Model(ModelConfig config, kernels::Backend& backend, Precision precision)
    : Olmo3Model(std::move(config), backend, precision, nullptr) {}

Olmo3Model::Olmo3Model(ModelConfig config, kernels::Backend& backend, Precision precision,
                       ShardedParameters* sharded)
    : config_(std::move(config)), layout_(config_), backend_(backend), sharded_(sharded) {
  config_.validate();
  blocks_.resize(static_cast<std::size_t>(config_.n_layers));
  if (sharded_) {
    // Views are bound unit by unit to the buffers the ShardedParameters hands out.
    units_ = parameter_units(layout_);
    weights_.blocks.resize(static_cast<std::size_t>(config_.n_layers));
    weight_grads_ = weights_;
    set_precision(precision);
    return;
  }
  params_ = backend_.allocate(DType::f32, Shape{layout_.total()});
  grads_ = backend_.allocate(DType::f32, Shape{layout_.total()});
  // The alignment gaps between tensors stay zero for good (reductions run over the whole buffer).
  backend_.zero(params_);
  backend_.zero(grads_);
  weights_ = model_tensors(layout_, params_);
  weight_grads_ = model_tensors(layout_, grads_);
  set_precision(precision);
}

void Olmo3Model::set_precision(Precision precision) {
  precision_ = precision;
  act_ = compute_dtype(precision);
  for (BlockActivations& a : blocks_) a = BlockActivations{};
  activation_buffers_.clear();
  workspace_ = Workspace{};
  capacity_tokens_ = -1;
  if (sharded_) {
    sharded_->set_compute_dtype(act_);  // units are gathered in the compute dtype
    compute_ = weights_;
  } else if (act_ == DType::f32) {
    compute_params_ = Buffer();
    compute_ = weights_;
  } else {
    // The embedding table (first in the layout) stays out of the copy: its lookup rounds the
    // f32 rows it reads, which gives the same bits and saves a bf16 table.
    compute_first_ =
        layout_.entry("embeddings.weight").offset + layout_.entry("embeddings.weight").numel;
    compute_params_ = backend_.allocate(act_, Shape{layout_.total() - compute_first_});
    compute_ = model_tensors_from(layout_, compute_params_, compute_first_);
    compute_.embeddings = weights_.embeddings;
  }
  cast_this_step_ = false;
}

void Olmo3Model::begin_step() {
  in_step_ = true;
  cast_this_step_ = false;
}

void Olmo3Model::end_step() { in_step_ = false; }

void Olmo3Model::prepare_compute_weights() {
  if (sharded_ || act_ == DType::f32 || (in_step_ && cast_this_step_)) return;
  // One cast over the flat buffer after the embedding table: the alignment gaps are zero in both.
  backend_.cast(compute_params_,
                params_.tensor().view(compute_first_, Shape{layout_.total() - compute_first_}));
  cast_this_step_ = true;
}

std::int64_t Olmo3Model::compute_weight_bytes() const {
  if (sharded_) return sharded_->gathered_weight_bytes();
  return compute_params_.tensor() ? static_cast<std::int64_t>(compute_params_.bytes()) : 0;
}

void Olmo3Model::ensure_rope_tables(std::int64_t T) {
  if (rope_full_.positions >= T && rope_sliding_.positions >= T) return;
  // A model without a length limit (max_sequence_length -1) grows its tables with the longest
  // sequence seen; otherwise they cover the whole context at once.
  const std::int64_t P = config_.max_sequence_length > 0 ? config_.max_sequence_length : T;
  const std::int64_t D = config_.head_dim;
  auto make = [&](const RopeConfig& rope, RopeTables& out) {
    kernels::RopeTable t = kernels::make_rope_table(P, D, rope_frequencies(rope, D));
    out.cos = backend_.allocate(DType::f32, Shape{P, D / 2});
    out.sin = backend_.allocate(DType::f32, Shape{P, D / 2});
    backend_.upload(out.cos, t.cos.data());
    backend_.upload(out.sin, t.sin.data());
    out.positions = P;
  };
  make(config_.full_attention_rope, rope_full_);
  make(config_.sliding_attention_rope, rope_sliding_);
}

void Olmo3Model::check_not_sharded(const char* what) const {
  TANDEM_CHECK(!sharded_,
               "{}: this model's parameters are sharded across ranks (dist.strategy fsdp/hsdp); "
               "no rank holds them whole",
               what);
}

void Olmo3Model::bind_unit(int u, const Tensor& flat, ModelTensors& into) const {
  const std::int64_t first = units_[static_cast<std::size_t>(u)].begin;
  const Tensor unit = flat.view(0, Shape{units_[static_cast<std::size_t>(u)].size()});
  if (u == 0) {
    into.embeddings = parameter_view_from(layout_, unit, first, "embeddings.weight");
  } else if (u == config_.n_layers + 1) {
    into.final_norm = parameter_view_from(layout_, unit, first, "lm_head.norm.weight");
    into.lm_head = parameter_view_from(layout_, unit, first, "lm_head.w_out.weight");
  } else {
    into.blocks[static_cast<std::size_t>(u - 1)] = block_tensors_from(layout_, unit, first, u - 1);
  }
}

void Olmo3Model::acquire_unit(int u, bool backward) {
  if (sharded_) bind_unit(u, sharded_->acquire(u, backward), compute_);
}

void Olmo3Model::acquire_unit_gradient(int u) {
  if (sharded_) bind_unit(u, sharded_->gradient(u), weight_grads_);
}

void Olmo3Model::release_unit(int u) {
  if (sharded_) sharded_->release(u);
}

void Olmo3Model::unit_gradient_done(int u) {
  if (sharded_)
    sharded_->gradient_done(u);
  else if (gradient_listener_)
    gradient_listener_->gradient_ready(u);
}

void Olmo3Model::set_gradient_listener(GradientReadyListener* listener) {
  check_not_sharded("set_gradient_listener");
  gradient_listener_ = listener;
}

void Olmo3Model::begin_pass(bool backward_follows) {
  if (sharded_) sharded_->begin_pass(backward_follows);
}

void Olmo3Model::end_pass() {
  if (sharded_) sharded_->end_pass();
}

Tensor Olmo3Model::param(const std::string& name) const {
  check_not_sharded("param");
  return parameter_view(layout_, params_, name);
}

Tensor Olmo3Model::grad(const std::string& name) const {
  check_not_sharded("grad");
  return parameter_view(layout_, grads_, name);
}

std::vector<float> Olmo3Model::params_to_host() const {
  check_not_sharded("params_to_host");
  return kernels::to_host_f32(backend_, params_);
}

std::vector<float> Olmo3Model::grads_to_host() const {
  check_not_sharded("grads_to_host");
  return kernels::to_host_f32(backend_, grads_);
}

void Olmo3Model::params_from_host(std::span<const float> flat) {
  check_not_sharded("params_from_host");
  TANDEM_CHECK(static_cast<std::int64_t>(flat.size()) == layout_.total(),
               "parameters: {} values for a layout of {}", flat.size(), layout_.total());
  backend_.upload(params_, flat.data());
}

void Olmo3Model::zero_grads() {
  if (sharded_)
    sharded_->zero_grads();
  else
    backend_.zero(grads_);
}

void Olmo3Model::init_weights(std::uint64_t seed) {
  if (sharded_) {
    // Each rank generates its own elements only (the generators are per tensor).
    for (const WeightSlice& s : sharded_->weights().slices)
      init_parameter_range(
          layout_, static_cast<std::size_t>(&layout_.entry(s.name) - layout_.entries().data()),
          config_.init_std, seed, s.start, s.values);
    sharded_->weights_written();
    return;
  }
  std::vector<float> host(static_cast<std::size_t>(layout_.total()), 0.0f);
  init_parameters(layout_, config_.init_std, seed, host.data());
  params_from_host(host);
}

Tensor Olmo3Model::rows(const Buffer& b, std::int64_t n, std::int64_t width) const {
  return b.tensor().view(0, Shape{n, width});
}

Tensor Olmo3Model::rows(const Tensor& t, std::int64_t n, std::int64_t width) const {
  return t.view(0, Shape{n, width});
}

void Olmo3Model::set_recompute(Recompute policy) {
  if (policy == recompute_) return;
  recompute_ = policy;
  for (BlockActivations& a : blocks_) a = BlockActivations{};
  activation_buffers_.clear();
  capacity_tokens_ = -1;  // the next forward allocates the new policy's buffers
}

namespace {
// none < selective < full in what they recompute.
int saving_level(Recompute policy) {
  switch (policy) {
    case Recompute::kSelective:
      return 1;
    case Recompute::kFull:
      return 2;
    case Recompute::kNone:
      break;
  }
  return 0;
}
}  // namespace

std::vector<Olmo3Model::ActivationField> Olmo3Model::activation_fields(const ModelConfig& c) {
  const std::int64_t d = c.d_model, qw = c.q_width(), kw = c.kv_width(), hid = c.hidden_size;
  using A = BlockActivations;
  // Selective keeps the attention module's matmul outputs, the attention output and its lse
  // (the expensive part to recompute), and recomputes the norms, RoPE and the MLP.
  return {
      {&A::input, d, false, 3},      {&A::q_proj, qw, false, 2},   {&A::k_proj, kw, false, 2},
      {&A::q_rstd, 1, true, 1},      {&A::k_rstd, 1, true, 1},     {&A::q, qw, false, 1},
      {&A::k, kw, false, 1},         {&A::v, kw, false, 2},        {&A::attn, qw, false, 2},
      {&A::lse, c.n_heads, true, 2}, {&A::attn_proj, d, false, 2}, {&A::attn_proj_rstd, 1, true, 1},
      {&A::h, d, false, 1},          {&A::gate, hid, false, 1},    {&A::up, hid, false, 1},
      {&A::mlp_act, hid, false, 1},  {&A::mlp_proj, d, false, 1},  {&A::mlp_proj_rstd, 1, true, 1},
  };
}

bool Olmo3Model::keeps(Recompute policy, const ActivationField& f) {
  return saving_level(policy) < f.recomputed_from;
}

void Olmo3Model::ensure_capacity(std::int64_t B, std::int64_t T) {
  TANDEM_CHECK(config_.accepts_sequence_length(T),
               "sequence length {} exceeds the model's max_sequence_length {}", T,
               config_.max_sequence_length);
  ensure_rope_tables(T);
  const std::int64_t N = B * T;
  if (N <= capacity_tokens_) return;
  const ModelConfig& c = config_;
  const std::int64_t d = c.d_model, qw = c.q_width(), kw = c.kv_width(), hid = c.hidden_size;
  // Statistics (rstd, lse) are f32 under every policy; the rest is in the compute dtype.
  auto f32 = [&](std::int64_t n) { return backend_.allocate(DType::f32, Shape{n}); };
  auto act = [&](std::int64_t n) { return backend_.allocate(act_, Shape{n}); };
  // Free first: the old and new sets never coexist.
  for (BlockActivations& a : blocks_) a = BlockActivations{};
  activation_buffers_.clear();
  for (const ActivationField& f : activation_fields(c)) {
    auto make = [&] { return f.statistic ? f32(N * f.width) : act(N * f.width); };
    if (keeps(recompute_, f)) {
      for (BlockActivations& a : blocks_) {
        activation_buffers_.push_back(make());
        a.*f.member = activation_buffers_.back().tensor();
      }
    } else if (!blocks_.empty()) {
      activation_buffers_.push_back(make());
      for (BlockActivations& a : blocks_) a.*f.member = activation_buffers_.back().tensor();
    }
  }
  Workspace& w = workspace_;
  w = Workspace{};
  w.ids = backend_.allocate(DType::i64, Shape{N});
  w.labels = backend_.allocate(DType::i64, Shape{N});
  w.doc_start = backend_.allocate(DType::i64, Shape{N});
  w.positions = backend_.allocate(DType::i64, Shape{N});
  w.normed = act(N * d);
  w.final_input = act(N * d);
  w.final_rstd = f32(N);
  w.final_normed = act(N * d);
  w.d_residual = act(N * d);
  w.d_branch = act(N * d);
  w.d_mlp_act = act(N * hid);
  w.d_gate = act(N * hid);
  w.d_attn = act(N * qw);
  w.d_q = act(N * qw);
  w.d_k = act(N * kw);
  w.d_v = act(N * kw);
  capacity_tokens_ = N;
}

std::int64_t Olmo3Model::activation_bytes(const ModelConfig& c, Recompute policy,
                                          std::int64_t tokens, std::int64_t value_bytes) {
  std::int64_t per_token = 0;  // bytes
  for (const ActivationField& f : activation_fields(c)) {
    const std::int64_t sets = keeps(policy, f) ? c.n_layers : std::min<std::int64_t>(c.n_layers, 1);
    per_token += sets * f.width * (f.statistic ? 4 : value_bytes);
  }
  return tokens * per_token;
}

std::int64_t Olmo3Model::workspace_bytes(const ModelConfig& c, std::int64_t tokens,
                                         std::int64_t value_bytes) {
  const std::int64_t d = c.d_model, qw = c.q_width(), kw = c.kv_width(), hid = c.hidden_size;
  // ids, labels, doc_start, positions (i64); final_rstd (f32); normed, final_input,
  // final_normed, d_residual, d_branch; d_mlp_act, d_gate; d_attn, d_q; d_k, d_v (the compute
  // dtype). As ensure_capacity.
  return tokens * (4 * 8 + 4 + value_bytes * (5 * d + 2 * hid + 2 * qw + 2 * kw));
}

std::int64_t Olmo3Model::rope_table_bytes(const ModelConfig& c, std::int64_t T) {
  const std::int64_t P = c.max_sequence_length > 0 ? c.max_sequence_length : T;
  return 2 * 2 * P * (c.head_dim / 2) * 4;  // cos and sin, two attention types, f32
}

void Olmo3Model::attention_projections(std::int64_t l, std::int64_t N) {
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const std::int64_t d = config_.d_model, qw = config_.q_width(), kw = config_.kv_width();
  const Tensor x = rows(a.input, N, d);
  backend_.linear_forward(x, p.w_q, rows(a.q_proj, N, qw));
  backend_.linear_forward(x, p.w_k, rows(a.k_proj, N, kw));
  backend_.linear_forward(x, p.w_v, rows(a.v, N, kw));
}

void Olmo3Model::qk_norm_rope(std::int64_t l, std::int64_t B, std::int64_t T) {
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const ModelConfig& c = config_;
  const std::int64_t N = B * T, qw = c.q_width(), kw = c.kv_width(), D = c.head_dim;
  const float eps = static_cast<float>(c.layer_norm_eps);
  const Tensor q = rows(a.q, N, qw), kk = rows(a.k, N, kw);
  backend_.rmsnorm_forward(rows(a.q_proj, N, qw), p.q_norm, q, a.q_rstd.view(0, Shape{N}), eps);
  backend_.rmsnorm_forward(rows(a.k_proj, N, kw), p.k_norm, kk, a.k_rstd.view(0, Shape{N}), eps);
  const RopeTables& rope = rope_of_layer(l);
  const Tensor positions =
      intra_document_ ? workspace_.positions.tensor().view(0, Shape{N}) : Tensor();
  backend_.rope_forward(q.reshape(Shape{B, T, c.n_heads, D}), rope.cos, rope.sin, positions);
  backend_.rope_forward(kk.reshape(Shape{B, T, c.n_kv_heads, D}), rope.cos, rope.sin, positions);
}

void Olmo3Model::attention(std::int64_t l, std::int64_t B, std::int64_t T) {
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const ModelConfig& c = config_;
  const std::int64_t N = B * T, d = c.d_model, qw = c.q_width(), kw = c.kv_width();
  const std::int64_t D = c.head_dim;
  const Tensor q4 = rows(a.q, N, qw).reshape(Shape{B, T, c.n_heads, D});
  const Tensor k4 = rows(a.k, N, kw).reshape(Shape{B, T, c.n_kv_heads, D});
  const Tensor v4 = rows(a.v, N, kw).reshape(Shape{B, T, c.n_kv_heads, D});
  const Tensor doc_start =
      intra_document_ ? workspace_.doc_start.tensor().view(0, Shape{N}) : Tensor();
  const Tensor attn = rows(a.attn, N, qw);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  backend_.attention_forward(q4, k4, v4, attn.reshape(Shape{B, T, c.n_heads, D}),
                             a.lse.view(0, Shape{B, c.n_heads, T}),
                             c.layer_windows[static_cast<std::size_t>(l)], scale, doc_start);
  backend_.linear_forward(attn, p.w_out, rows(a.attn_proj, N, d));
}

void Olmo3Model::attention_residual(std::int64_t l, std::int64_t N) {
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const std::int64_t d = config_.d_model;
  const Tensor normed = rows(workspace_.normed, N, d);
  backend_.rmsnorm_forward(rows(a.attn_proj, N, d), p.attention_norm, normed,
                           a.attn_proj_rstd.view(0, Shape{N}),
                           static_cast<float>(config_.layer_norm_eps));
  backend_.add(rows(a.input, N, d), normed, rows(a.h, N, d));
}

void Olmo3Model::mlp(std::int64_t l, std::int64_t N, const Tensor* out) {
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const std::int64_t d = config_.d_model, hid = config_.hidden_size;
  kernels::Backend& k = backend_;
  const Tensor h = rows(a.h, N, d), gate = rows(a.gate, N, hid), up = rows(a.up, N, hid);
  const Tensor mlp_act = rows(a.mlp_act, N, hid), mlp_proj = rows(a.mlp_proj, N, d);
  const Tensor normed = rows(workspace_.normed, N, d);
  k.linear_forward(h, p.w1, gate);
  k.linear_forward(h, p.w3, up);
  k.swiglu_forward(gate, up, mlp_act);
  k.linear_forward(mlp_act, p.w2, mlp_proj);
  k.rmsnorm_forward(mlp_proj, p.feed_forward_norm, normed, a.mlp_proj_rstd.view(0, Shape{N}),
                    static_cast<float>(config_.layer_norm_eps));
  if (out) k.add(h, normed, *out);
}

void Olmo3Model::forward_block(std::int64_t l, const Tensor& out, std::int64_t B, std::int64_t T) {
  const std::int64_t N = B * T;
  attention_projections(l, N);
  qk_norm_rope(l, B, T);
  attention(l, B, T);
  attention_residual(l, N);
  mlp(l, N, &out);
}

void Olmo3Model::recompute_block(std::int64_t l, std::int64_t B, std::int64_t T) {
  const std::int64_t N = B * T;
  switch (recompute_) {
    case Recompute::kNone:
      return;
    case Recompute::kFull:
      // The block's output (the next block's input) is not needed again: not written.
      attention_projections(l, N);
      qk_norm_rope(l, B, T);
      attention(l, B, T);
      attention_residual(l, N);
      mlp(l, N, nullptr);
      return;
    case Recompute::kSelective:
      qk_norm_rope(l, B, T);
      attention_residual(l, N);
      mlp(l, N, nullptr);
      return;
  }
}

void Olmo3Model::backward_block(std::int64_t l, std::int64_t B, std::int64_t T) {
  kernels::Backend& k = backend_;
  const BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
  const BlockTensors& p = compute_.blocks[static_cast<std::size_t>(l)];
  const BlockTensors& g = weight_grads_.blocks[static_cast<std::size_t>(l)];
  Workspace& w = workspace_;
  const ModelConfig& c = config_;
  const std::int64_t N = B * T, d = c.d_model, qw = c.q_width(), kw = c.kv_width();
  const std::int64_t hid = c.hidden_size, D = c.head_dim;
  const Tensor d_res = rows(w.d_residual, N, d), d_branch = rows(w.d_branch, N, d);

  // out = h + norm_ffn(mlp_proj): d_res becomes dL/dh as the MLP's input gradients add in.
  k.rmsnorm_backward(rows(a.mlp_proj, N, d), p.feed_forward_norm, a.mlp_proj_rstd.view(0, Shape{N}),
                     d_res, d_branch, g.feed_forward_norm);
  const Tensor mlp_act = rows(a.mlp_act, N, hid), d_mlp_act = rows(w.d_mlp_act, N, hid);
  k.linear_backward(mlp_act, p.w2, d_branch, d_mlp_act, g.w2, false);
  // mlp_act is dead once w2's gradient is taken: its memory receives d_up.
  const Tensor gate = rows(a.gate, N, hid), up = rows(a.up, N, hid);
  const Tensor d_gate = rows(w.d_gate, N, hid), d_up = mlp_act;
  k.swiglu_backward(gate, up, d_mlp_act, d_gate, d_up);
  const Tensor h = rows(a.h, N, d);
  k.linear_backward(h, p.w1, d_gate, d_res, g.w1, true);
  k.linear_backward(h, p.w3, d_up, d_res, g.w3, true);

  // h = x + norm_attn(attn_proj): d_res becomes dL/dx as the attention's input gradients add in.
  k.rmsnorm_backward(rows(a.attn_proj, N, d), p.attention_norm, a.attn_proj_rstd.view(0, Shape{N}),
                     d_res, d_branch, g.attention_norm);
  const Tensor attn = rows(a.attn, N, qw), d_attn = rows(w.d_attn, N, qw);
  k.linear_backward(attn, p.w_out, d_branch, d_attn, g.w_out, false);
  const Shape q_shape{B, T, c.n_heads, D}, kv_shape{B, T, c.n_kv_heads, D};
  const Tensor q4 = a.q.view(0, q_shape), k4 = a.k.view(0, kv_shape);
  const Tensor v4 = a.v.view(0, kv_shape);
  const Tensor d_q4 = w.d_q.tensor().view(0, q_shape), d_k4 = w.d_k.tensor().view(0, kv_shape);
  const Tensor d_v4 = w.d_v.tensor().view(0, kv_shape);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Tensor positions = intra_document_ ? w.positions.tensor().view(0, Shape{N}) : Tensor();
  const Tensor doc_start = intra_document_ ? w.doc_start.tensor().view(0, Shape{N}) : Tensor();
  k.attention_backward(q4, k4, v4, attn.reshape(q_shape), a.lse.view(0, Shape{B, c.n_heads, T}),
                       d_attn.reshape(q_shape), d_q4, d_k4, d_v4,
                       c.layer_windows[static_cast<std::size_t>(l)], scale, doc_start);
  const RopeTables& rope = rope_of_layer(l);
  k.rope_backward(d_q4, rope.cos, rope.sin, positions);
  k.rope_backward(d_k4, rope.cos, rope.sin, positions);
  // d_attn and k are dead now: their memory receives the gradients before QK-norm.
  const Tensor d_q_proj = d_attn, d_k_proj = rows(a.k, N, kw);
  k.rmsnorm_backward(rows(a.q_proj, N, qw), p.q_norm, a.q_rstd.view(0, Shape{N}),
                     d_q4.reshape(Shape{N, qw}), d_q_proj, g.q_norm);
  k.rmsnorm_backward(rows(a.k_proj, N, kw), p.k_norm, a.k_rstd.view(0, Shape{N}),
                     d_k4.reshape(Shape{N, kw}), d_k_proj, g.k_norm);
  const Tensor x = rows(a.input, N, d);
  k.linear_backward(x, p.w_q, d_q_proj, d_res, g.w_q, true);
  k.linear_backward(x, p.w_k, d_k_proj, d_res, g.w_k, true);
  k.linear_backward(x, p.w_v, d_v4.reshape(Shape{N, kw}), d_res, g.w_v, true);
}

void Olmo3Model::forward_hidden(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                const std::int64_t* doc_start) {
  ensure_capacity(B, T);
  prepare_compute_weights();
  const std::int64_t N = B * T, d = config_.d_model;
  Workspace& w = workspace_;
  backend_.upload(w.ids.tensor().view(0, Shape{N}), ids);
  intra_document_ = doc_start != nullptr;
  if (doc_start) {
    // OLMo-core's intra-document RoPE: a token's position counts from its document's start.
    const std::vector<std::int64_t> positions = document_positions(doc_start, B, T);
    backend_.upload(w.doc_start.tensor().view(0, Shape{N}), doc_start);
    backend_.upload(w.positions.tensor().view(0, Shape{N}), positions.data());
  }
  // Each block writes its output straight into the next block's input buffer.
  const Tensor first =
      blocks_.empty() ? rows(w.final_input, N, d) : rows(blocks_.front().input, N, d);
  const int head = static_cast<int>(config_.n_layers) + 1;
  acquire_unit(0, false);
  backend_.embedding_forward(w.ids.tensor().view(0, Shape{N}), compute_.embeddings, first);
  release_unit(0);
  for (std::int64_t l = 0; l < config_.n_layers; ++l) {
    const bool last = l + 1 == config_.n_layers;
    const Tensor out = last ? rows(w.final_input, N, d)
                            : rows(blocks_[static_cast<std::size_t>(l + 1)].input, N, d);
    acquire_unit(static_cast<int>(l) + 1, false);
    forward_block(l, out, B, T);
    release_unit(static_cast<int>(l) + 1);
  }
  // The head stays acquired for the lm_head (and the final norm's backward); its caller releases.
  acquire_unit(head, false);
  backend_.rmsnorm_forward(rows(w.final_input, N, d), compute_.final_norm,
                           rows(w.final_normed, N, d), w.final_rstd.tensor().view(0, Shape{N}),
                           static_cast<float>(config_.layer_norm_eps));
}

LossSums Olmo3Model::forward_backward(const std::int64_t* ids, const std::int64_t* labels,
                                      std::int64_t B, std::int64_t T, float z_weight,
                                      float grad_scale, bool backward,
                                      const std::int64_t* doc_start) {
  if (const std::int64_t piece = forward_only_rows(B, T); !backward && piece < B) {
    // The sums of the pieces, in row order.
    LossSums total;
    for (std::int64_t b = 0; b < B; b += piece) {
      const LossSums s =
          forward_backward(ids + b * T, labels + b * T, std::min(piece, B - b), T, z_weight,
                           grad_scale, false, doc_start ? doc_start + b * T : nullptr);
      total.ce_sum += s.ce_sum;
      total.z_sum += s.z_sum;
      total.count += s.count;
    }
    return total;
  }
  begin_pass(backward);
  forward_hidden(ids, B, T, doc_start);
  const std::int64_t N = B * T, d = config_.d_model;
  const int head = static_cast<int>(config_.n_layers) + 1;
  if (backward) acquire_unit_gradient(head);
  Workspace& w = workspace_;
  const Tensor label_t = w.labels.tensor().view(0, Shape{N});
  backend_.upload(label_t, labels);
  const Tensor d_res = rows(w.d_residual, N, d);
  LossSums sums = backend_.lm_head_cross_entropy(
      rows(w.final_normed, N, d), compute_.lm_head, label_t, z_weight, grad_scale,
      backward ? rows(w.d_branch, N, d) : Tensor(), backward ? weight_grads_.lm_head : Tensor());
  if (!backward) {
    release_unit(head);
    end_pass();
    return sums;
  }

  backend_.rmsnorm_backward(rows(w.final_input, N, d), compute_.final_norm,
                            w.final_rstd.tensor().view(0, Shape{N}), rows(w.d_branch, N, d), d_res,
                            weight_grads_.final_norm);
  release_unit(head);
  unit_gradient_done(head);
  for (std::int64_t l = config_.n_layers - 1; l >= 0; --l) {
    const int unit = static_cast<int>(l) + 1;
    acquire_unit(unit, true);
    acquire_unit_gradient(unit);
    recompute_block(l, B, T);
    backward_block(l, B, T);
    release_unit(unit);
    unit_gradient_done(unit);
  }
  // The embedding's backward reads no weights: its gradient buffer only.
  acquire_unit_gradient(0);
  backend_.embedding_backward(w.ids.tensor().view(0, Shape{N}), d_res, weight_grads_.embeddings);
  unit_gradient_done(0);
  end_pass();
  return sums;
}

}  // namespace tandem::model
