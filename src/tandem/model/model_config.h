// Model configuration for the OLMo family (OLMo 2 and OLMo 3), read from a YAML `model:` mapping
// (keys follow OLMo-core's names) or from an HF config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/io/config.h"

namespace tandem::model {

// RoPE of one attention type: transformers' rope_parameters entry for "full_attention" or
// "sliding_attention" (OLMo 2 and OLMo-core models use one RoPE on every layer).
struct RopeConfig {
  std::string type = "default";  // "default", "linear" or "yarn"
  double theta = 500000.0;
  // linear and yarn:
  double factor = 1.0;
  // yarn only:
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;  // resolved (transformers derives it from factor when absent)
  bool truncate = true;           // floor/ceil the ramp bounds (transformers' formula only)
  // The YaRN formula of OLMo-core's YaRNRoPEScalingConfig (YAML rope_scaling) instead of
  // transformers' (HF config.json); they differ in rounding and in where the ramp is clamped.
  bool olmo_core_formula = false;

  bool operator==(const RopeConfig&) const = default;
};

// The largest value of any one size (d_model, n_layers, ...): products of sizes stay far inside
// 64 bits, and a typo is an error rather than an allocation of exabytes.
inline constexpr std::int64_t kMaxModelSize = std::int64_t{1} << 24;

// A size read from `where` must be in [1, kMaxModelSize]. Checked as it is read where something is
// allocated or computed from it before ModelConfig::validate() (one entry per layer, a rounding).
void check_model_size(std::int64_t value, const std::string& where);

struct ModelConfig {
  std::int64_t d_model = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;        // GQA when < n_heads
  std::int64_t head_dim = 0;          // defaults to d_model / n_heads
  std::int64_t hidden_size = 0;       // SwiGLU hidden width
  std::int64_t vocab_size = 0;        // tokenizer vocabulary; token ids must be below it
  std::int64_t embedding_size = 0;    // rows of embedding/lm_head (vocab padded); softmax spans all
  RopeConfig full_attention_rope;     // layers with layer_windows[l] == 0
  RopeConfig sliding_attention_rope;  // layers with a window
  double layer_norm_eps = 1e-5;
  // Per-layer attention window in tokens; 0 = full causal attention. Derived from the
  // sliding-window pattern (OLMo-core's SlidingWindowAttentionConfig) or from HF layer_types at
  // parse time.
  std::vector<std::int64_t> layer_windows;
  double init_std = 0.02;
  // Longest sequence the model accepts; -1 = no limit (HF max_position_embeddings -1, as
  // OLMo-core's HF export writes it).
  std::int64_t max_sequence_length = 8192;

  std::int64_t q_width() const { return n_heads * head_dim; }
  std::int64_t kv_width() const { return n_kv_heads * head_dim; }
  bool is_full_attention(std::int64_t layer) const { return layer_windows.at(layer) == 0; }
  bool has_sliding_window() const;
  const RopeConfig& rope_of_layer(std::int64_t layer) const {
    return is_full_attention(layer) ? full_attention_rope : sliding_attention_rope;
  }
  bool accepts_sequence_length(std::int64_t T) const {
    return max_sequence_length < 0 || T <= max_sequence_length;
  }
  // Checks the sizes are consistent; throws Error naming the offending key.
  void validate() const;
  // Parameters of every matmul (incl. lm_head, not the embedding lookup) and all parameters.
  std::int64_t matmul_params() const;
  std::int64_t total_params() const;
  // Training FLOPs per token, window-aware: 6N + 12 * sum_l(n_heads * head_dim * min(window, seq)).
  // The MFU's count, the one the project's targets are stated in (OLMo-core's earlier releases
  // counted so too): every query against min(window, seq) keys, whatever the causal mask hides.
  double flops_per_token(std::int64_t seq_len) const;
  // Training FLOPs per token as OLMo-core 3.0 counts them (Transformer.num_flops_per_token): 6 per
  // parameter of the attention (QK-norm weights included), feed-forward and lm_head (its norm
  // included) modules, and per layer 12 * n_heads * head_dim * causal_attention_pairs(seq,
  // window) / seq, rounded down: the (query, key) pairs the causal, windowed mask lets through.
  std::int64_t olmo_core_flops_per_token(std::int64_t seq_len) const;
};

// The (query, key) pairs of a causal sequence of seq_len tokens in which a query sees at most
// `window` keys, itself included (0: no window): seq (seq + 1) / 2 when the window covers it.
std::int64_t causal_attention_pairs(std::int64_t seq_len, std::int64_t window);

// OLMo-core's SlidingWindowAttentionConfig: the window of every layer (0 = full attention).
// Layer i uses pattern[i % len] (-1 = full); with force_first, layer 0 is full and the pattern
// starts at layer 1; with force_last, the last layer is full.
std::vector<std::int64_t> sliding_window_layout(const std::vector<std::int64_t>& pattern,
                                                std::int64_t n_layers, bool force_first,
                                                bool force_last);

// Reads a `model:` mapping (docs/config.md). Keys: d_model, n_layers, n_heads, n_kv_heads,
// head_dim, hidden_size, vocab_size, embedding_size | pad_vocab_to_multiple_of, rope_theta,
// rope_scaling (OLMo-core's YaRN) | rope_parameters (per attention type, transformers' names),
// layer_norm_eps, init_std, max_sequence_length, sliding_window {pattern: [...],
// force_full_attention_on_first_layer, force_full_attention_on_last_layer} (absent or null = full
// attention everywhere). Defaults are OLMo-core's.
ModelConfig parse_model_config(io::ConfigSection section);
// Reads a model config from a YAML file: its `model:` mapping (other top-level keys are ignored),
// with key=value overrides (e.g. model.n_layers=4).
ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides);
YAML::Node model_config_to_yaml(const ModelConfig& config);

// HF transformers config.json in and out: model/hf_config.h.

}  // namespace tandem::model
