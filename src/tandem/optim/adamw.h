// AdamW over named fp32 parameter tensors of a backend, with OLMo-core's semantics
// (torch.optim.AdamW's arithmetic): decoupled decay p *= 1 - lr * wd, bias-corrected moments, eps
// added after the square root of the bias-corrected second moment. The scalars are formed here in
// double and rounded once; the element update is the backend's adamw_updates op (every tensor in
// one). The optimiser owns the moments, stored flat on the backend (parameters laid end to end in
// registration order) so checkpoints can save them per parameter and ZeRO-1 can shard them by flat
// ranges.
//
// Deterministic: every element is updated independently, so results do not depend on the thread
// count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/kernels/backend.h"

namespace tandem::optim {

struct ParamBuffer {
  std::string name;
  kernels::Tensor param;     // f32
  kernels::Tensor grad;      // f32, same numel
  bool weight_decay = true;  // OLMo recipe: false only for the embedding
  std::size_t size() const { return static_cast<std::size_t>(param.numel()); }
};

// OLMo-core's recipe decays every parameter except the token embedding (named
// `embeddings.weight` in OLMo-core, `model.embed_tokens.weight` in HF); norms ARE decayed.
bool olmo_weight_decay_applies(std::string_view param_name);

// OLMo-core's OptimGroupOverride for weight decay: the parameters whose names match one of
// `params` (glob patterns as Python's fnmatch reads them: *, ?, [seq], [!seq]; no escapes) take
// `weight_decay` instead of the optimiser's.
struct WeightDecayGroup {
  std::vector<std::string> params;
  double weight_decay = 0.0;
};

// Python's fnmatch.fnmatch(name, pattern) on POSIX (case-sensitive; `*` also matches dots).
bool matches_param_pattern(std::string_view pattern, std::string_view name);

// OLMo-core's checks of its group overrides against the model's parameter names: every pattern
// matches a parameter, and no parameter falls in two groups (torch refuses that). Throws
// tandem::core::Error naming the pattern or parameter.
void check_weight_decay_groups(const std::vector<WeightDecayGroup>& groups,
                               const std::vector<std::string>& parameter_names);

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // OLMo-core's group_overrides: when set, each parameter's decay is its group's (the first whose
  // pattern matches) or `weight_decay`; unset, the OLMo 3 recipe: `weight_decay` where the
  // ParamBuffer's flag says so (every parameter but the embedding).
  std::optional<std::vector<WeightDecayGroup>> groups;
  void validate() const;  // throws tandem::core::Error on out-of-range values
  double weight_decay_of(const ParamBuffer& p) const;
};

class AdamW {
 public:
  AdamW(kernels::Backend& backend, std::vector<ParamBuffer> params, AdamWHyper hyper);

  // One update of every parameter with learning rate `lr`; the step count goes up by one.
  // A skipped step (skip-step rule) is simply not calling this.
  void step(double lr);
  // The same update restricted to flat element range [begin, end) (a ZeRO-1 shard). The step count
  // still goes up by one: call it once per optimiser step.
  void step_range(double lr, std::size_t begin, std::size_t end);

  std::size_t num_params() const { return params_.size(); }
  const ParamBuffer& param(std::size_t i) const { return params_[i]; }
  std::size_t total_size() const { return total_; }
  const AdamWHyper& hyper() const { return hyper_; }

  // State for checkpoints: flat moments on the backend (or one parameter's part) and the number
  // of updates applied so far (bias correction uses step_count() + 1 for the next update).
  const kernels::Tensor& exp_avg() const { return exp_avg_.tensor(); }
  const kernels::Tensor& exp_avg_sq() const { return exp_avg_sq_.tensor(); }
  kernels::Tensor exp_avg(std::size_t i) const;
  kernels::Tensor exp_avg_sq(std::size_t i) const;
  // (exp_avg(i), exp_avg_sq(i)) for every parameter, in order: what a checkpoint saves.
  std::vector<std::pair<kernels::Tensor, kernels::Tensor>> moment_runs() const;
  std::int64_t step_count() const { return step_; }
  void set_step_count(std::int64_t step);

 private:
  kernels::Backend& backend_;
  std::vector<ParamBuffer> params_;
  std::vector<std::size_t> offsets_;  // offsets_[i] = flat start of parameter i
  std::size_t total_ = 0;
  AdamWHyper hyper_;
  std::vector<double> decays_;  // decays_[i]: parameter i's weight decay
  kernels::Buffer exp_avg_;
  kernels::Buffer exp_avg_sq_;
  std::int64_t step_ = 0;
};

}  // namespace tandem::optim
