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
  WsdSchedule(WarmupSpec warmup, std::optional<std::int64_t> decay,
              std::optional<double> decay_fraction, double decay_min_lr)
      : warmup_(warmup),
        decay_(decay),
        decay_fraction_(decay_fraction),
        decay_min_lr_(decay_min_lr) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  WarmupSpec warmup_;
  std::optional<std::int64_t> decay_;
  std::optional<double> decay_fraction_;
  double decay_min_lr_;
};

// `first` up to and including `switch_step`, `second` afterwards; both see the absolute
// step/token count, the same initial_lr and the trainer's t_max (each may fix its own t_max).
// This is how AI2 extended OLMo 3 7B stage 1: a cosine for 5T tokens stopped at step 597,046,
// then a half-cosine (warmup = 597,046) toward a 7T-token horizon.
class StitchedSchedule : public Schedule {
 public:
  StitchedSchedule(std::unique_ptr<Schedule> first, std::int64_t switch_step,
                   std::unique_ptr<Schedule> second)
      : first_(std::move(first)), switch_step_(switch_step), second_(std::move(second)) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  std::unique_ptr<Schedule> first_;
  std::int64_t switch_step_;
  std::unique_ptr<Schedule> second_;
};

// Builds a schedule from a mapping such as
//   {name: cos_with_warmup, warmup: 2000, alpha_f: 0.1, t_max: 1192093}
// Strict: unknown names or keys, negative counts and out-of-range fractions throw
// tandem::core::Error naming the key.
std::unique_ptr<Schedule> make_schedule(io::ConfigSection section);

// The learning rate for global step `step` (1-based) of a `max_steps` run whose global batch holds
// `global_batch_tokens` tokens, as OLMo-core's trainer feeds its scheduler: in step units
// (step, max_steps), in token units (tokens seen including this batch, max_steps * batch tokens).
double scheduled_lr(const Schedule& schedule, double initial_lr, std::int64_t step,
                    std::int64_t max_steps, std::int64_t global_batch_tokens);

}  // namespace tandem::optim
