// Model configuration for the OLMo family (OLMo 2 and OLMo 3), read from a YAML `model:` mapping
// (keys follow OLMo-core's names) or from an HF config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/io/config.h"

namespace tandem::model {

struct ModelConfig {
  std::int64_t d_model = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;      // GQA when < n_heads
  std::int64_t head_dim = 0;        // defaults to d_model / n_heads
  std::int64_t hidden_size = 0;     // SwiGLU hidden width
  std::int64_t vocab_size = 0;      // tokenizer vocabulary; token ids must be below it
  std::int64_t embedding_size = 0;  // rows of embedding/lm_head (vocab padded); softmax spans all
  double rope_theta = 500000.0;
  double layer_norm_eps = 1e-6;
  // Per-layer attention window in tokens; 0 = full causal attention. Derived from the
  // sliding-window pattern (OLMo-core's SlidingWindowAttentionConfig) at parse time.
  std::vector<std::int64_t> layer_windows;
  double init_std = 0.02;
  std::int64_t max_sequence_length = 8192;  // bounds the RoPE table

  std::int64_t q_width() const { return n_heads * head_dim; }
  std::int64_t kv_width() const { return n_kv_heads * head_dim; }
  bool is_full_attention(std::int64_t layer) const { return layer_windows.at(layer) == 0; }
  // Checks the sizes are consistent; throws Error naming the offending key.
  void validate() const;
  // Parameters of every matmul (incl. lm_head, not the embedding lookup) and all parameters.
  std::int64_t matmul_params() const;
  std::int64_t total_params() const;
  // Training FLOPs per token, window-aware: 6N + 12 * sum_l(n_heads * head_dim * min(window, seq)).
  double flops_per_token(std::int64_t seq_len) const;
};

// Reads a `model:` mapping. Keys: d_model, n_layers, n_heads, n_kv_heads, head_dim, hidden_size,
// vocab_size, embedding_size | pad_vocab_to_multiple_of, rope_theta, layer_norm_eps, init_std,
// max_sequence_length, sliding_window {pattern: [...], force_full_attention_on_first_layer,
// force_full_attention_on_last_layer} (absent or null = full attention everywhere).
ModelConfig parse_model_config(io::ConfigSection section);
// Reads a model config from a YAML file: its `model:` mapping (other top-level keys are ignored),
// with key=value overrides (e.g. model.n_layers=4).
ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides);
YAML::Node model_config_to_yaml(const ModelConfig& config);

// HF transformers config.json (Olmo2ForCausalLM / Olmo3ForCausalLM) in and out.
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source);
nlohmann::json model_config_to_hf(const ModelConfig& config);

}  // namespace tandem::model
