// The OLMo 3 (and OLMo 2) decoder, written once against the backend interface
// (kernels/backend.h): forward to logits, scores or loss, backward to every parameter's gradient.
// Block ("reordered norm", no pre-norm):
//   h   = x + RMSNorm_attn(Attention(x))      q/k: RMSNorm over the whole projection, then RoPE
//   out = h + RMSNorm_ffn(SwiGLU(h))
// then a final RMSNorm and an untied lm_head. Parameters and gradients are two flat f32 buffers
// of the backend laid out by ParameterLayout, seen through typed per-layer views. Under the bf16
// precision policy (model/precision.h) the forward and backward read a bf16 copy of the
// parameters and keep their activations in bf16; the gradients stay f32. What the blocks keep for
// backward follows the activation recompute policy (model/recompute.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/backend.h"
#include "tandem/kernels/rope_table.h"
#include "tandem/model/model_config.h"
#include "tandem/model/parameters.h"
#include "tandem/model/precision.h"
#include "tandem/model/recompute.h"
#include "tandem/model/sharded_parameters.h"

namespace tandem::model {

using LossSums = kernels::LossSums;

// The RoPE frequencies (and attention factor) of one attention type's config.
kernels::RopeFrequencies rope_frequencies(const RopeConfig& rope, std::int64_t head_dim);

// Told during a backward when a unit's gradients (the units of model/sharded_parameters.h) are
// complete in grads(): a data-parallel optimiser starts reducing them while the backward goes on.
// Units complete in the backward's order: the head, the blocks from last to first, the embedding.
class GradientReadyListener {
 public:
  virtual ~GradientReadyListener() = default;
  virtual void gradient_ready(int unit) = 0;
};

class Olmo3Model {
 public:
  Olmo3Model(ModelConfig config, kernels::Backend& backend, Precision precision = Precision::kFp32);
  // A model whose parameters and gradients are sharded (FSDP, model/sharded_parameters.h): it
  // allocates no whole parameter or gradient buffer and gathers each unit's weights from
  // `sharded` around the unit's forward and backward. params() and grads() are then empty, and
  // param(), grad(), *_to_host and params_from_host refuse with an error: the rank's masters are
  // reached through sharded()->weights() (init_weights initialises just those).
  Olmo3Model(ModelConfig config, kernels::Backend& backend, Precision precision,
             ShardedParameters* sharded);
  ShardedParameters* sharded() const { return sharded_; }

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  kernels::Backend& backend() const { return backend_; }
  Precision precision() const { return precision_; }
  // Switches the policy (frees the activations; the masters are untouched).
  void set_precision(Precision precision);

  // Flat parameter and gradient buffers (f32 [layout().total()], on the backend) and their
  // typed views.
  const kernels::Tensor& params() const { return params_.tensor(); }
  const kernels::Tensor& grads() const { return grads_.tensor(); }
  const ModelTensors& weights() const { return weights_; }
  const ModelTensors& weight_grads() const { return weight_grads_; }
  // One parameter (or its gradient) by OLMo-core name, for IO and tests.
  kernels::Tensor param(const std::string& name) const;
  kernels::Tensor grad(const std::string& name) const;

  // Host copies of the flat buffers (checkpoints, conversion, parity).
  std::vector<float> params_to_host() const;
  void params_from_host(std::span<const float> flat);
  std::vector<float> grads_to_host() const;

  void zero_grads();
  void init_weights(std::uint64_t seed);
  // A model with whole gradient buffers (not sharded) tells `listener` (null: nobody) of each
  // unit whose gradients a backward has completed.
  void set_gradient_listener(GradientReadyListener* listener);

  // A training step's bracket. Under bf16 every forward outside a step casts the masters to the
  // bf16 compute weights (they may have changed); inside a step the first forward casts and the
  // other micro-batches reuse the copy, as the masters change only after the step's backward.
  void begin_step();
  void end_step();

  // Every forward takes an optional doc_start[B*T] (host, model/documents.h): intra-document
  // masking as OLMo-core's doc_lens, attention kept inside each document and RoPE positions
  // restarting at each document's start. Null = each row is one document.

  // logits[B*T, embedding_size] (host) for ids[B, T] (host); no activations kept for backward.
  void forward_logits(const std::int64_t* ids, std::int64_t B, std::int64_t T, float* logits,
                      const std::int64_t* doc_start = nullptr);
  // log_softmax(logits at flat position positions[i] = b * T + t)[targets[i]]: downstream scoring
  // needs a few positions per sequence, so the lm_head runs there only.
  std::vector<double> token_log_probs(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                      std::span<const std::int64_t> positions,
                                      std::span<const std::int64_t> targets,
                                      const std::int64_t* doc_start = nullptr);
  // Loss sums over labels[B, T] (core::kIgnoreIndex = ignored). When `backward`, adds the
  // gradients of grad_scale * (ce_sum + z_weight * z_sum) to grads().
  LossSums forward_backward(const std::int64_t* ids, const std::int64_t* labels, std::int64_t B,
                            std::int64_t T, float z_weight, float grad_scale, bool backward,
                            const std::int64_t* doc_start = nullptr);

  // Forward-only passes (forward_logits, token_log_probs, forward_backward without backward) run
  // their rows in pieces of at most `tokens` tokens (one row at least), so that an evaluation
  // between training steps never grows the activation buffers past the training micro-batch's,
  // which `tandem plan` counts (the trainer sets it to that micro-batch; a batch of 8 rows of
  // 8,192 tokens would otherwise keep every block's activations for 65,536 tokens). The results
  // are the whole batch's up to the rounding of GEMMs over fewer rows (a kernel chosen by shape);
  // 0 (the default) runs any batch whole.
  void set_forward_only_token_limit(std::int64_t tokens);
  // The passes (pieces) a forward-only call over B rows of T tokens makes: for a sharded model,
  // the rounds of unit gathers every rank of its group must make alike.
  std::int64_t forward_only_passes(std::int64_t B, std::int64_t T) const;
  // One forward-only pass over a single token, its result dropped: the cheapest pass that makes
  // a sharded model's collective gathers, for a rank with less to evaluate than its peers.
  void forward_only_padding_pass();

  // The activation recompute policy (default none). Changing it frees the activation buffers;
  // the next forward allocates them for the new policy.
  void set_recompute(Recompute policy);
  Recompute recompute() const { return recompute_; }

  // Bytes of the activation buffers at B*T tokens under the current recompute and precision
  // policies: what every block keeps for its backward plus the one set the blocks share for what
  // they recompute (exactly what ensure_capacity allocates; the workspace is not included).
  std::int64_t activation_bytes(std::int64_t tokens) const {
    return activation_bytes(config_, recompute_, tokens, value_bytes());
  }
  // Bytes of the bf16 compute copy of the weights (0 under fp32; the embedding table is read
  // from the masters, so it has no copy).
  std::int64_t compute_weight_bytes() const;
  // The same for any config and policy without a model (the planner, train/plan.h);
  // `value_bytes` is the compute dtype's size (norm statistics and the log-sum-exp stay fp32).
  static std::int64_t activation_bytes(const ModelConfig& config, Recompute policy,
                                       std::int64_t tokens, std::int64_t value_bytes);
  // Bytes of the scratch every block shares (Workspace) at `tokens` tokens, and of the RoPE
  // tables for sequences of length T: the rest of what a forward and backward allocate.
  static std::int64_t workspace_bytes(const ModelConfig& config, std::int64_t tokens,
                                      std::int64_t value_bytes);
  static std::int64_t rope_table_bytes(const ModelConfig& config, std::int64_t T);

 private:
  // What one block's backward reads, named for what it holds: views of the activation buffers,
  // the block's own where the recompute policy keeps the value, else the set shared by every
  // block (written again by the block's recompute just before its backward).
  struct BlockActivations {
    kernels::Tensor input;           // x, the block input [N, d]              kept always
    kernels::Tensor q_proj, k_proj;  // x w_q^T, x w_k^T before QK-norm        kept unless full
    kernels::Tensor q_rstd, k_rstd;  // QK-norm statistics [N]                 kept by none
    kernels::Tensor q, k;            // q, k after QK-norm and RoPE            kept by none
    kernels::Tensor v;               // x w_v^T [N, kv width]                  kept unless full
    kernels::Tensor attn;            // attention output [N, q width]          kept unless full
    kernels::Tensor lse;             // attention log-sum-exp [B, n_heads, T]  kept unless full
    kernels::Tensor attn_proj;       // attn w_out^T, before attention_norm    kept unless full
    kernels::Tensor attn_proj_rstd;  // attention_norm statistics              kept by none
    kernels::Tensor h;               // x + attention_norm(attn_proj) [N, d]   kept by none
    kernels::Tensor gate, up;        // h w1^T, h w3^T [N, hidden]             kept by none
    kernels::Tensor mlp_act;         // silu(gate) * up [N, hidden]            kept by none
    kernels::Tensor mlp_proj;        // mlp_act w2^T, before feed_forward_norm kept by none
    kernels::Tensor mlp_proj_rstd;   // feed_forward_norm statistics           kept by none
  };
  // One field of BlockActivations: its width per token, whether it is a statistic (kept fp32 under
  // any precision), and the first policy, in the order none (0) < selective (1) < full (2), that
  // recomputes it (3: none does).
  struct ActivationField {
    kernels::Tensor BlockActivations::*member;
    std::int64_t width;
    bool statistic;
    int recomputed_from;
  };
  static std::vector<ActivationField> activation_fields(const ModelConfig& config);
  static bool keeps(Recompute policy, const ActivationField& f);
  // Scratch reused by every block.
  struct Workspace {
    kernels::Buffer ids, labels;            // the batch on the device (i64 [N])
    kernels::Buffer doc_start, positions;   // intra-document masking (i64 [N]), when given
    kernels::Buffer normed;                 // a post-norm's output before its residual add [N, d]
    kernels::Buffer final_input;            // last block's output [N, d]
    kernels::Buffer final_rstd;             // lm_head.norm statistics
    kernels::Buffer final_normed;           // lm_head.norm output, the lm_head's input [N, d]
    kernels::Buffer d_residual;             // dL/d(block output), turned into dL/d(block input)
    kernels::Buffer d_branch;               // dL/d(attn_proj) or dL/d(mlp_proj) [N, d]
    kernels::Buffer d_mlp_act, d_gate;      // [N, hidden]
    kernels::Buffer d_attn, d_q, d_k, d_v;  // [N, q width], [N, q width], [N, kv width] x 2
  };

  void ensure_capacity(std::int64_t B, std::int64_t T);
  // Sharded model: points the compute views (and, for `grads`, the gradient views) of unit `u`
  // at the buffer the ShardedParameters handed out.
  void bind_unit(int u, const kernels::Tensor& flat, ModelTensors& into) const;
  void acquire_unit(int u, bool backward);
  void acquire_unit_gradient(int u);
  void release_unit(int u);  // no-ops when not sharded
  void unit_gradient_done(int u);
  void begin_pass(bool backward_follows);
  void end_pass();
  void check_not_sharded(const char* what) const;
  // The weights the forward and backward read: the masters (fp32) or their bf16 copy, cast here
  // when stale.
  void prepare_compute_weights();
  std::int64_t value_bytes() const { return static_cast<std::int64_t>(kernels::dtype_size(act_)); }
  // RoPE tables of both attention types covering positions [0, T) on the backend.
  void ensure_rope_tables(std::int64_t T);
  // Runs the blocks and the final norm; leaves the lm_head's input in workspace_.final_normed.
  // Uploads ids (and doc_start with its RoPE positions) for the backward that may follow.
  void forward_hidden(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                      const std::int64_t* doc_start);
  void forward_block(std::int64_t l, const kernels::Tensor& out, std::int64_t B, std::int64_t T);
  // The stages of forward_block, in order. The backward's recompute runs the stages whose
  // outputs the policy did not keep, with the same kernels on the same inputs, so the values are
  // bit-identical to the forward's.
  void attention_projections(std::int64_t l, std::int64_t N);         // q_proj, k_proj, v
  void qk_norm_rope(std::int64_t l, std::int64_t B, std::int64_t T);  // q, k and their rstd
  void attention(std::int64_t l, std::int64_t B, std::int64_t T);     // attn, lse, attn_proj
  void attention_residual(std::int64_t l, std::int64_t N);            // h and its norm's rstd
  // gate, up, mlp_act, mlp_proj and its norm's rstd; then out = h + norm(mlp_proj) if `out`.
  void mlp(std::int64_t l, std::int64_t N, const kernels::Tensor* out);
  // Before backward_block(l): writes again what the policy did not keep of block l.
  void recompute_block(std::int64_t l, std::int64_t B, std::int64_t T);
  // On entry d_residual holds dL/d(output of block l); on exit dL/d(input of block l).
  void backward_block(std::int64_t l, std::int64_t B, std::int64_t T);
  // The public forward-only passes on one piece of rows (see set_forward_only_token_limit).
  void forward_logits_piece(const std::int64_t* ids, std::int64_t B, std::int64_t T, float* logits,
                            const std::int64_t* doc_start);
  std::vector<double> token_log_probs_piece(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                            std::span<const std::int64_t> positions,
                                            std::span<const std::int64_t> targets,
                                            const std::int64_t* doc_start);
  // Rows per piece of a forward-only pass over B rows of T tokens.
  std::int64_t forward_only_rows(std::int64_t B, std::int64_t T) const;
  // [N, width] view of a buffer sized for the capacity.
  kernels::Tensor rows(const kernels::Buffer& b, std::int64_t n, std::int64_t width) const;
  kernels::Tensor rows(const kernels::Tensor& t, std::int64_t n, std::int64_t width) const;

  ModelConfig config_;
  ParameterLayout layout_;
  kernels::Backend& backend_;
  ShardedParameters* sharded_ = nullptr;
  GradientReadyListener* gradient_listener_ = nullptr;
  std::vector<ParameterUnit> units_;
  kernels::Buffer params_, grads_;
  ModelTensors weights_, weight_grads_;
  Precision precision_ = Precision::kFp32;
  kernels::DType act_ = kernels::DType::f32;  // activations and compute weights
  kernels::Buffer compute_params_;            // bf16 copy of params_ past the embeddings
  std::int64_t compute_first_ = 0;            // where that copy starts in the layout
  ModelTensors compute_;                      // what the forward/backward read
  bool in_step_ = false, cast_this_step_ = false;
  struct RopeTables {
    kernels::Buffer cos, sin;  // [positions, head_dim / 2]
    std::int64_t positions = 0;
  };
  const RopeTables& rope_of_layer(std::int64_t l) const {
    return config_.is_full_attention(l) ? rope_full_ : rope_sliding_;
  }
  RopeTables rope_full_, rope_sliding_;
  bool intra_document_ = false;  // the current forward's doc_start was given
  Recompute recompute_ = Recompute::kNone;
  std::vector<BlockActivations> blocks_;
  std::vector<kernels::Buffer> activation_buffers_;  // what blocks_ views
  Workspace workspace_;
  std::int64_t capacity_tokens_ = -1;
  std::int64_t capacity_batch_ = -1;
  std::int64_t forward_only_token_limit_ = 0;
};

}  // namespace tandem::model
