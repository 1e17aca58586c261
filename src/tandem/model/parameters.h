// The model's parameters: one flat fp32 buffer with named, shaped views in a fixed order. The
// flat layout lets the optimiser, gradient reduction and ZeRO sharding work on ranges.
// Names follow OLMo-core (embeddings.weight, blocks.N.attention.w_q.weight, ...).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/tensor.h"
#include "tandem/model/model_config.h"

namespace tandem::model {

struct ParameterEntry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;  // in floats, into the flat buffer
  std::int64_t numel = 0;
  bool weight_decay = true;  // OLMo-core: every parameter but embeddings.weight is decayed
  bool is_norm = false;      // initialised to 1
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);
  const std::vector<ParameterEntry>& entries() const { return entries_; }
  const ParameterEntry& entry(const std::string& name) const;  // throws naming the parameter
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  std::int64_t total() const { return total_; }

 private:
  void add(std::string name, std::vector<std::int64_t> shape, bool is_norm);
  std::vector<ParameterEntry> entries_;
  std::map<std::string, std::size_t> index_;
  std::int64_t total_ = 0;
};

// Names of the per-layer parameters, in one place.
std::string block_param(std::int64_t layer, const char* suffix);

// Typed views of one flat buffer laid out by a ParameterLayout (the parameters, or their
// gradients), llm.c's ParameterTensors: built once, so the forward and backward never look a
// tensor up by name.
struct BlockTensors {
  kernels::Tensor w_q, w_k, w_v, w_out;  // attention projections [out, in]
  kernels::Tensor q_norm, k_norm;        // QK-norm over the whole projection width
  kernels::Tensor attention_norm;        // post-attention RMSNorm
  kernels::Tensor w1, w2, w3;            // SwiGLU: gate, down, up
  kernels::Tensor feed_forward_norm;     // post-MLP RMSNorm
};
struct ModelTensors {
  kernels::Tensor embeddings;  // [embedding_size, d_model]
  std::vector<BlockTensors> blocks;
  kernels::Tensor final_norm;  // lm_head.norm
  kernels::Tensor lm_head;     // lm_head.w_out [embedding_size, d_model]
};
// The view of parameter `name` inside `flat` (shape from the layout).
kernels::Tensor parameter_view(const ParameterLayout& layout, const kernels::Tensor& flat,
                               const std::string& name);
ModelTensors model_tensors(const ParameterLayout& layout, const kernels::Tensor& flat);
// Views of a buffer holding the layout's values from offset `first` on (parameters that start
// before it are left undefined): the bf16 compute copy, which leaves out the embedding table.
ModelTensors model_tensors_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                std::int64_t first);

// The view of parameter `name` inside a buffer holding the layout's elements from `first` on
// (an FSDP unit's gathered weights or gradients).
kernels::Tensor parameter_view_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                    std::int64_t first, const std::string& name);
BlockTensors block_tensors_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                std::int64_t first, std::int64_t layer);

// OLMo-core init: truncated normal (std, cut at +-3 std) for every matrix, ones for norms.
// Deterministic for a given seed, whatever the thread count.
void init_parameters(const ParameterLayout& layout, double std, std::uint64_t seed, float* flat);
// The same values for elements [start, start + out.size()) of parameter `index` only (a shard's
// part: the generator runs through the whole tensor, storing the range).
void init_parameter_range(const ParameterLayout& layout, std::size_t index, double std,
                          std::uint64_t seed, std::int64_t start, std::span<float> out);

}  // namespace tandem::model
