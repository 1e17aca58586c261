// AdamW over named fp32 parameter buffers, with OLMo-core's semantics (torch.optim.AdamW's
// arithmetic): decoupled decay p *= 1 - lr * wd, bias-corrected moments, eps added after the
// square root of the bias-corrected second moment. The optimiser owns the moments, stored flat
// (parameters laid end to end in registration order) so checkpoints can save them per parameter
// and ZeRO-1 can shard them by flat ranges.
//
// Deterministic: every element is updated independently, so results do not depend on the thread
// count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::optim {

struct ParamBuffer {
  std::string name;
  float* param = nullptr;
  const float* grad = nullptr;
  std::size_t size = 0;
  bool weight_decay = true;  // OLMo recipe: false only for the embedding
};

// OLMo-core's recipe decays every parameter except the token embedding (named
// `embeddings.weight` in OLMo-core, `model.embed_tokens.weight` in HF); norms ARE decayed.
bool olmo_weight_decay_applies(std::string_view param_name);

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  void validate() const;  // throws tandem::Error on out-of-range values
};

class AdamW {
 public:
  AdamW(std::vector<ParamBuffer> params, AdamWHyper hyper);

  // One update of every parameter with learning rate `lr`; the step count goes up by one.
  // A skipped step (skip-step rule) is simply not calling this.
  void step(double lr);
  // The same update restricted to flat element range [begin, end) (a ZeRO-1 shard). The step count
  // still goes up by one: call it once per optimiser step.
  void step_range(double lr, std::size_t begin, std::size_t end);

  // Points parameter i at new buffers (same size), e.g. after the trainer reallocates.
  void rebind(std::size_t i, float* param, const float* grad);

  std::size_t num_params() const { return params_.size(); }
  const ParamBuffer& param(std::size_t i) const { return params_[i]; }
  std::size_t index_of(std::string_view name) const;  // throws if unknown
  std::size_t offset(std::size_t i) const { return offsets_[i]; }
  std::size_t total_size() const { return exp_avg_.size(); }
  const AdamWHyper& hyper() const { return hyper_; }

  // State for checkpoints: flat moments (or one parameter's slice) and the number of updates
  // applied so far (bias correction uses step_count() + 1 for the next update).
  std::span<float> exp_avg() { return exp_avg_; }
  std::span<float> exp_avg_sq() { return exp_avg_sq_; }
  std::span<const float> exp_avg() const { return exp_avg_; }
  std::span<const float> exp_avg_sq() const { return exp_avg_sq_; }
  std::span<float> exp_avg(std::size_t i);
  std::span<float> exp_avg_sq(std::size_t i);
  std::int64_t step_count() const { return step_; }
  void set_step_count(std::int64_t step);

 private:
  std::vector<ParamBuffer> params_;
  std::vector<std::size_t> offsets_;  // offsets_[i] = flat start of parameter i
  AdamWHyper hyper_;
  std::vector<float> exp_avg_;
  std::vector<float> exp_avg_sq_;
  std::int64_t step_ = 0;
};

}  // namespace tandem::optim
