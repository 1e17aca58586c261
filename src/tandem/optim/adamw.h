// AdamW over named fp32 parameter tensors of a backend, with OLMo-core's semantics: decoupled
// decay p *= 1 - lr * wd, bias-corrected moments, eps added after the square root of the
// bias-corrected second moment; in the fp32 arithmetic of OLMo-core's SkipStepAdamW (its default
// foreach path, the OLMo 3 recipe's, or its single-tensor path) or of torch.optim.AdamW
// (OLMo-core's `adamw`), operation for operation (kernels::AdamWArithmetic, adamw_scalars). The
// element update is the backend's adamw_updates op (every tensor in one). The optimiser owns the
// moments, stored flat on the backend (parameters laid end to end in registration order) so
// checkpoints can save them per parameter and ZeRO-1 can shard them by flat ranges.
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

// OLMo-core's OptimGroupOverride: the parameters whose names match one of `params` (glob
// patterns as Python's fnmatch reads them: *, ?, [seq], [!seq]; no escapes) form a torch parameter
// group whose options replace the optimiser's where given. A group's own `lr` is its schedule's
// initial lr (OLMo-core's initial_lr): the schedule runs per group.
struct ParamGroupOverride {
  std::vector<std::string> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
  std::optional<double> beta1, beta2;  // given together (torch's betas)
  std::optional<double> eps;
  void validate() const;  // throws tandem::core::Error on out-of-range values
};

// Python's fnmatch.fnmatch(name, pattern) on POSIX (case-sensitive; `*` also matches dots).
bool matches_param_pattern(std::string_view pattern, std::string_view name);

// OLMo-core's checks of its group overrides against the model's parameter names: every pattern
// matches a parameter, and no parameter falls in two groups (torch refuses that). Throws
// tandem::core::Error naming the pattern or parameter.
void check_group_overrides(const std::vector<ParamGroupOverride>& groups,
                           const std::vector<std::string>& parameter_names);

// One parameter's AdamW options once the group overrides are applied. `lr_slot` says which of
// the step's learning rates it takes (AdamWHyper::lr_slots).
struct ParamHyper {
  std::size_t lr_slot = 0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

// The fp32 scalars of update number t (1, 2, ...) at learning rate `lr` for parameters with
// options `h`, formed as the arithmetic's reference forms them:
//   torch_adamw        torch.optim.AdamW: each scalar computed in double (Python floats) and
//                      rounded to fp32 once;
//   olmo_core_foreach  OLMo-core's foreach_adamw_step (and olmo_core_single its adamw_step,
//                      the same scalars), whose step counts are fp32 tensors: the
//                      bias corrections are 1 - powf(beta, t) in fp32 (glibc's powf, torch's
//                      scalar pow on the CPU; its vectorised pow differs by one ulp at some t),
//                      the step size is (1 / bc1) * lr (torch's `lr / tensor` is reciprocal() *
//                      lr), and every other scalar one fp32 operation from the rounded options.
kernels::AdamWScalars adamw_scalars(kernels::AdamWArithmetic arithmetic, const ParamHyper& h,
                                    double lr, std::int64_t t);

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // OLMo-core's group_overrides: when set, each parameter takes the options of its group (the
  // first whose pattern matches), the optimiser's where the group gives none; unset, the OLMo 3
  // recipe: `weight_decay` where the ParamBuffer's flag says so (every parameter but the
  // embedding).
  std::optional<std::vector<ParamGroupOverride>> groups;
  // OLMo-core's skip_step_adamw (foreach, its default, or not) or adamw (torch.optim.AdamW).
  kernels::AdamWArithmetic arithmetic = kernels::AdamWArithmetic::olmo_core_foreach;
  void validate() const;  // throws tandem::core::Error on out-of-range values

  // The learning rates a step takes: slot i < groups->size() for group i (used only when that
  // group gives its own lr), the last slot for every other parameter (the optimiser's lr).
  std::size_t lr_slots() const { return groups ? groups->size() + 1 : 1; }
  ParamHyper resolve(const ParamBuffer& p) const;
};

class AdamW {
 public:
  AdamW(kernels::Backend& backend, std::vector<ParamBuffer> params, AdamWHyper hyper);

  // One update of every parameter, with learning rate lrs[slot] for the parameters of each lr slot
  // (lrs.size() == hyper().lr_slots()); the step count goes up by one. A skipped step (skip-step
  // rule) is simply not calling this.
  void step(std::span<const double> lrs);
  // Every parameter at `lr`: only where no group gives its own lr.
  void step(double lr);
  // The same update restricted to flat element range [begin, end) (a ZeRO-1 shard). The step count
  // still goes up by one: call it once per optimiser step.
  void step_range(std::span<const double> lrs, std::size_t begin, std::size_t end);

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
  // The parameters updated by one adamw_updates op: those sharing an lr slot, betas and eps,
  // with one non-zero decay (the parameters without decay join the first such call).
  struct UpdateCall {
    ParamHyper hyper;
    std::vector<std::size_t> params;
  };
  std::vector<UpdateCall> calls_;
  std::vector<double> decays_;  // decays_[i]: parameter i's weight decay
  void add_to_update_call(const ParamHyper& h, std::size_t param);
  kernels::Buffer exp_avg_;
  kernels::Buffer exp_avg_sq_;
  std::int64_t step_ = 0;
};

}  // namespace tandem::optim
