// Learning-rate schedules with OLMo-core's semantics (olmo_core.optim.scheduler), built from a YAML
// mapping. A schedule maps (initial_lr, current, t_max) to a learning rate exactly as OLMo-core's
// Scheduler.get_lr does: `current` is the trainer's global step (1 for the first optimiser step)
// or tokens seen, `t_max` the trainer's horizon in the same unit unless the schedule fixes its own.
// Keys are documented in docs/optimizer.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/io/config.h"

namespace tandem::optim {

enum class ScheduleUnits { kSteps, kTokens };

class Schedule {
 public:
  virtual ~Schedule() = default;
  // The learning rate at `current` for a run whose peak (optimiser) lr is `initial_lr` and whose
  // horizon is `t_max`. Values past t_max stay at the schedule's final value.
  virtual double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const = 0;
  ScheduleUnits units() const { return units_; }
  void set_units(ScheduleUnits units) { units_ = units; }

 private:
  ScheduleUnits units_ = ScheduleUnits::kSteps;
};

// Warmup given either as a step count or as a fraction of t_max (rounded half-to-even, as Python's
// round()), exactly one of the two.
struct WarmupSpec {
  std::optional<std::int64_t> steps;
  std::optional<double> fraction;
  double min_lr = 0.0;  // warmup starts from here (OLMo-core's warmup_min_lr)
  std::int64_t resolve(std::int64_t t_max) const;
};

// A decay length given as a step count or as a fraction of a length (rounded half to even).
struct DecaySpec {
  std::optional<std::int64_t> steps;
  std::optional<double> fraction;
  std::int64_t resolve(std::int64_t length) const;
};

class ConstantSchedule : public Schedule {
 public:
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;
};

class ConstantWithWarmupSchedule : public Schedule {
 public:
  explicit ConstantWithWarmupSchedule(WarmupSpec warmup) : warmup_(warmup) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  WarmupSpec warmup_;
};

// OLMo-core's shape for cosine, half-cosine and linear: linear warmup to warmup_peak() until
// `warmup`, then decay() down to eta_min = alpha_f * initial_lr at t_max (the schedule's own t_max
// when it fixes one), eta_min from then on.
class DecayWithWarmupSchedule : public Schedule {
 public:
  DecayWithWarmupSchedule(WarmupSpec warmup, double alpha_f, std::optional<std::int64_t> t_max)
      : warmup_(warmup), alpha_f_(alpha_f), t_max_(t_max) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const final;

 protected:
  virtual double warmup_peak(double initial_lr, double eta_min) const { return initial_lr; }
  // warmup <= current < t_max
  virtual double decay(double initial_lr, double eta_min, std::int64_t current, std::int64_t warmup,
                       std::int64_t t_max) const = 0;

 private:
  WarmupSpec warmup_;
  double alpha_f_;
  std::optional<std::int64_t> t_max_;
};

// Linear warmup, then cosine from initial_lr down to alpha_f * initial_lr at t_max.
class CosWithWarmupSchedule : public DecayWithWarmupSchedule {
 public:
  using DecayWithWarmupSchedule::DecayWithWarmupSchedule;

 protected:
  double decay(double initial_lr, double eta_min, std::int64_t current, std::int64_t warmup,
               std::int64_t t_max) const override;
};

// The second half of a cosine whose peak is initial_lr: after the "warmup" (which ramps up to the
// cosine's midpoint value), it falls from the midpoint to alpha_f * initial_lr at t_max. AI2 used
// it to extend a running cosine: warmup = the step where the old cosine crossed its midpoint.
class HalfCosWithWarmupSchedule : public DecayWithWarmupSchedule {
 public:
  using DecayWithWarmupSchedule::DecayWithWarmupSchedule;

 protected:
  double warmup_peak(double initial_lr, double eta_min) const override;
  double decay(double initial_lr, double eta_min, std::int64_t current, std::int64_t warmup,
               std::int64_t t_max) const override;
};

// Linear warmup, then linear from initial_lr to alpha_f * initial_lr at t_max.
class LinearWithWarmupSchedule : public DecayWithWarmupSchedule {
 public:
  using DecayWithWarmupSchedule::DecayWithWarmupSchedule;

 protected:
  double decay(double initial_lr, double eta_min, std::int64_t current, std::int64_t warmup,
               std::int64_t t_max) const override;
};

// Warmup-stable-decay: linear warmup, constant, then linear decay to decay_min_lr over the last
// `decay` steps (or decay_fraction * t_max) before t_max.
class WsdSchedule : public Schedule {
 public:
  WsdSchedule(WarmupSpec warmup, DecaySpec decay, double decay_min_lr)
      : warmup_(warmup), decay_(decay), decay_min_lr_(decay_min_lr) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  WarmupSpec warmup_;
  DecaySpec decay_;
  double decay_min_lr_;
};

// Linear warmup (exclusive of the warmup step), then eta_min + (lr - eta_min) sqrt(warmup /
// current) with eta_min = alpha_f * lr: OLMo-core's InvSqrtWithWarmup, which ignores t_max.
class InvSqrtWithWarmupSchedule : public Schedule {
 public:
  InvSqrtWithWarmupSchedule(WarmupSpec warmup, double alpha_f)
      : warmup_(warmup), alpha_f_(alpha_f) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  WarmupSpec warmup_;
  double alpha_f_;
};

// OLMo-core's PowerLR: linear warmup, then lr (current / warmup)^b (b < 0), and over the last
// `decay` steps a linear decay from the power law's value where the tail starts to decay_min_lr.
class PowerLrSchedule : public Schedule {
 public:
  PowerLrSchedule(WarmupSpec warmup, double b, DecaySpec decay, double decay_min_lr)
      : warmup_(warmup), b_(b), decay_(decay), decay_min_lr_(decay_min_lr) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  WarmupSpec warmup_;
  double b_;
  DecaySpec decay_;
  double decay_min_lr_;
};

// OLMo-core's CosWithWarmupAndLinearDecay: the cosine (its own t_max if it fixes one) until the
// last `decay` steps of the trainer's t_max, then linear from the cosine's value there to
// decay_min_lr.
class CosWithWarmupAndLinearDecaySchedule : public Schedule {
 public:
  CosWithWarmupAndLinearDecaySchedule(CosWithWarmupSchedule cosine, DecaySpec decay,
                                      double decay_min_lr)
      : cosine_(std::move(cosine)), decay_(decay), decay_min_lr_(decay_min_lr) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  CosWithWarmupSchedule cosine_;
  DecaySpec decay_;
  double decay_min_lr_;
};

// OLMo-core's ExponentialScheduler: from lr_min at 0 up to lr at t_max, lr_min (lr /
// lr_min)^(current / t_max); lr from t_max on.
class ExponentialSchedule : public Schedule {
 public:
  explicit ExponentialSchedule(double lr_min) : lr_min_(lr_min) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  double lr_min_;
};

// OLMo-core's WSDS (warmup-stable-decay-simplified, for continual pre-training): periods of
// given lengths, each at its own peak (lr x its multiplier) then a linear decay to decay_min_lr
// over its last `decay` steps (or decay_fraction of its length); a warmup taken from the first
// period. Fixed lengths: t_max is ignored; after the last period, decay_min_lr.
class WsdsSchedule : public Schedule {
 public:
  // Throws core::Error if the warmup and the first decay overrun the first period or a decay its
  // period (OLMo-core's checks).
  WsdsSchedule(std::vector<std::int64_t> period_lengths, std::vector<double> multipliers,
               WarmupSpec warmup, DecaySpec decay, double decay_min_lr);
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  double peak(double initial_lr, std::size_t period) const;
  std::vector<std::int64_t> lengths_;
  std::vector<double> multipliers_;  // empty: 1 for every period
  double warmup_min_lr_;
  std::int64_t warmup_;
  DecaySpec decay_;
  double decay_min_lr_;
  std::vector<std::int64_t> adjusted_lengths_;  // the first less the warmup
  std::vector<std::int64_t> period_ends_;       // cumulative, over the adjusted lengths
};

// Builds a schedule from a mapping such as
//   {name: cos_with_warmup, warmup: 2000, alpha_f: 0.1, t_max: 1192093}
// Strict: unknown names or keys, negative counts and out-of-range fractions throw
// tandem::core::Error naming the key. Every OLMo-core 3.0 scheduler name is accepted; the composite
// ones (stitched, sequential, composable) are in schedule_composite.h.
std::unique_ptr<Schedule> make_schedule(io::ConfigSection section);

// The trainer's horizon as OLMo-core's scheduler sees it: Trainer.max_steps and max_tokens of its
// max_duration (a duration in steps: max_steps batches; in tokens: that many tokens, which
// ceil(tokens / batch) steps reach), and the tokens of one global batch.
struct TrainingHorizon {
  std::int64_t max_steps = 0;
  std::int64_t max_tokens = 0;
  std::int64_t global_batch_tokens = 0;
  // A duration of `max_steps` steps of `global_batch_tokens` tokens each.
  static TrainingHorizon in_steps(std::int64_t max_steps, std::int64_t global_batch_tokens) {
    return {max_steps, max_steps * global_batch_tokens, global_batch_tokens};
  }
};

// The learning rate for global step `step` (1-based), as OLMo-core's trainer feeds its scheduler:
// in step units (step, max_steps), in token units (tokens seen including this batch,
// max_tokens).
double scheduled_lr(const Schedule& schedule, double initial_lr, std::int64_t step,
                    const TrainingHorizon& horizon);

}  // namespace tandem::optim
