// Loading and saving model weights: tandem model directories (model.yaml + model.safetensors with
// OLMo-core parameter names, fp32, padded vocab) and HF transformers directories (config.json +
// model.safetensors or a sharded index, HF names, vocab truncated to the tokenizer's size).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/io/safetensors.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/model/sharded_parameters.h"

namespace tandem::model {

// HF name of a tandem parameter ("blocks.3.attention.w_q.weight" -> "model.layers.3.self_attn.
// q_proj.weight").
std::string hf_name_of(const std::string& tandem_name);

bool is_hf_model_dir(const std::string& path);      // has config.json
bool is_tandem_model_dir(const std::string& path);  // has model.yaml

struct LoadOptions {
  // HF -> tandem: pad embedding rows up to a multiple of this (1 keeps HF's function exactly;
  // padded rows are zero, so their logits are 0 and enter the softmax).
  std::int64_t pad_vocab_multiple = 1;
  // HF -> tandem: pad embedding rows to exactly this many instead (0: by pad_vocab_multiple); a
  // run's initial weights take its config's embedding_size (an HF release keeps only the
  // tokenizer's rows: OLMo 3's 100278 of the 100352 it trained with).
  std::int64_t embedding_size = 0;
  bool check_finite = true;  // refuse NaN/Inf weights, naming the tensor
};

// A model's config and its flat fp32 parameters (ParameterLayout order) in host memory.
struct ModelWeights {
  ModelConfig config;
  std::vector<float> flat;
  io::DType source_dtype = io::DType::kF32;  // the dtype the weights were stored in
};

// Reads either kind of directory. Every tensor must be present with the exact shape; errors name
// the file and tensor.
ModelWeights read_model_weights(const std::string& path, const LoadOptions& options = {});
// The same with the directory's config already read (read_model_dir_config with `options`).
ModelWeights read_model_weights(const std::string& path, const ModelConfig& config,
                                const LoadOptions& options);
// The config of a model directory of either kind, as read_model_weights reads it (an HF model's
// embedding rows padded as `options` says).
ModelConfig read_model_dir_config(const std::string& path, const LoadOptions& options = {});
// Fills each slice (a run of one parameter of `config`'s layout; `config` as
// read_model_dir_config gave it) from the model directory `path`, reading only those runs: what
// one rank of a sharded run holds, without the whole model in memory. Same checks and conversions
// as read_model_weights; returns the dtype the weights were stored in.
io::DType read_model_weight_slices(const std::string& path, const ModelConfig& config,
                                   std::vector<WeightSlice>& slices,
                                   const LoadOptions& options = {});
// The same, as a model on `backend`.
std::unique_ptr<Olmo3Model> load_model(const std::string& path, kernels::Backend& backend,
                                       const LoadOptions& options = {},
                                       io::DType* source_dtype = nullptr);

// Weights from `source` may seed a model of `expected` only when every field that decides how the
// flat parameter buffer is cut into tensors and used matches: d_model, n_layers, n_heads,
// n_kv_heads, head_dim, hidden_size, vocab_size, embedding_size. An equal parameter count is not
// enough (n_heads 4 x head_dim 8 and 8 x 4 even give the same tensor shapes). RoPE theta, norm
// epsilon, windows and max_sequence_length may differ (a later stage may change them). Throws
// core::Error naming `source` and each field that differs.
void check_same_architecture(const ModelConfig& found, const ModelConfig& expected,
                             const std::string& source);
// check_same_architecture for initial weights read from `path` (found: read_model_dir_config with
// the embedding padded to expected's), except that the model's vocabulary may be any size from
// expected's vocab_size up to its embedding_size: HF's vocab_size is the rows a release stores
// (and a tandem model converted from one keeps it).
void check_initial_weights(const std::string& path, const ModelConfig& found,
                           const ModelConfig& expected);

void save_tandem_model(const std::string& dir, const ModelConfig& config,
                       std::span<const float> flat, io::DType source_dtype = io::DType::kF32);
void save_tandem_model(const std::string& dir, const Olmo3Model& model,
                       io::DType source_dtype = io::DType::kF32);
// model.yaml only (the weights of a sharded checkpoint are written by each rank,
// model/weight_shards.h).
void save_tandem_model_config(const std::string& dir, const ModelConfig& config);
// Writes config.json + model.safetensors in `dtype` (rows past vocab_size dropped).
void save_hf_model(const std::string& dir, const ModelConfig& config, std::span<const float> flat,
                   io::DType dtype);

}  // namespace tandem::model
