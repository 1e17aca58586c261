// HF transformers config.json (Olmo2ForCausalLM / Olmo3ForCausalLM) read and written the way
// transformers 5.x reads and writes it: every optional field with transformers' default, RoPE per
// attention type (rope_parameters.full_attention / .sliding_attention, with the legacy flat
// rope_theta and rope_scaling applied to full-attention layers only, as Olmo3Config does),
// layer_types defaulting to "full iff (i + 1) % 4 == 0" with no forcing, max_position_embeddings
// -1 (OLMo-core's export) meaning no limit. What transformers would refuse, or tandem cannot run
// (other activations, tied embeddings, biases, other RoPE types), is an error naming the key.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tandem/model/model_config.h"

namespace tandem::model {

// `source` names the file in errors. embedding_size is set to vocab_size (no padding).
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source);

// The config.json transformers' save_pretrained writes for the same model (without
// transformers_version); `dtype` is the weights' dtype name ("float32", "bfloat16", "float16").
// Olmo3 when some layer has a window (one window size only), else Olmo2.
nlohmann::json model_config_to_hf(const ModelConfig& config, const std::string& dtype = "float32");

}  // namespace tandem::model
