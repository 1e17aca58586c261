#include "tandem/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

// The arithmetic below keeps OLMo-core's operation order so that results agree to the last bit or
// two of a double.

double linear_warmup(double initial_lr, std::int64_t current, std::int64_t warmup, double min_lr) {
  TANDEM_CHECK(min_lr <= initial_lr, "schedule: warmup_min_lr {} is above the peak lr {}", min_lr,
               initial_lr);
  if (warmup <= 0) return initial_lr;  // OLMo-core would divide by zero here
  return min_lr + (initial_lr - min_lr) * static_cast<double>(std::min(current, warmup)) /
                      static_cast<double>(warmup);
}

double linear_decay(double initial_lr, std::int64_t steps_from_end, std::int64_t decay,
                    double min_lr) {
  TANDEM_CHECK(min_lr <= initial_lr, "schedule: decay_min_lr {} is above the peak lr {}", min_lr,
               initial_lr);
  if (decay <= 0) return min_lr;
  // OLMo-core's min(step_from_end, decay): past t_max (the last step of a duration in tokens that
  // ends inside its batch, counted in tokens) the decay goes on below min_lr, negative even. AI2's
  // runs take that last update, so tandem does too.
  steps_from_end = std::min(steps_from_end, decay);
  return min_lr +
         (initial_lr - min_lr) * static_cast<double>(steps_from_end) / static_cast<double>(decay);
}

double cosine(double eta_min, double initial_lr, std::int64_t current, std::int64_t t_max) {
  return eta_min + (initial_lr - eta_min) *
                       (1.0 + std::cos(std::numbers::pi * static_cast<double>(current) /
                                       static_cast<double>(t_max))) /
                       2.0;
}

}  // namespace

std::int64_t DecaySpec::resolve(std::int64_t length) const {
  if (steps) return *steps;
  return static_cast<std::int64_t>(std::nearbyint(static_cast<double>(length) * fraction.value()));
}

std::int64_t WarmupSpec::resolve(std::int64_t t_max) const {
  if (steps) return *steps;
  // Python's round(): half to even, which is nearbyint under the default rounding mode.
  return static_cast<std::int64_t>(std::nearbyint(static_cast<double>(t_max) * fraction.value()));
}

double ConstantSchedule::lr(double initial_lr, std::int64_t, std::int64_t) const {
  return initial_lr;
}

double ConstantWithWarmupSchedule::lr(double initial_lr, std::int64_t current,
                                      std::int64_t t_max) const {
  std::int64_t warmup = warmup_.resolve(t_max);
  if (current <= warmup) return linear_warmup(initial_lr, current, warmup, warmup_.min_lr);
  return initial_lr;
}

double DecayWithWarmupSchedule::lr(double initial_lr, std::int64_t current,
                                   std::int64_t t_max) const {
  if (t_max_) t_max = *t_max_;
  double eta_min = initial_lr * alpha_f_;
  std::int64_t warmup = warmup_.resolve(t_max);
  if (current < warmup)
    return linear_warmup(warmup_peak(initial_lr, eta_min), current, warmup, warmup_.min_lr);
  if (current >= t_max) return eta_min;
  return decay(initial_lr, eta_min, current, warmup, t_max);
}

double CosWithWarmupSchedule::decay(double initial_lr, double eta_min, std::int64_t current,
                                    std::int64_t warmup, std::int64_t t_max) const {
  return cosine(eta_min, initial_lr, current - warmup, t_max - warmup);
}

double HalfCosWithWarmupSchedule::warmup_peak(double initial_lr, double eta_min) const {
  return eta_min + (initial_lr - eta_min) / 2.0;  // the cosine's midpoint
}

double HalfCosWithWarmupSchedule::decay(double initial_lr, double eta_min, std::int64_t current,
                                        std::int64_t warmup, std::int64_t t_max) const {
  std::int64_t span = t_max - warmup;
  // The second half of a cosine of length 2 * span: position span + (current - warmup).
  return cosine(eta_min, initial_lr, current - warmup + span, span * 2);
}

double LinearWithWarmupSchedule::decay(double initial_lr, double eta_min, std::int64_t current,
                                       std::int64_t warmup, std::int64_t t_max) const {
  double fraction = static_cast<double>(current - warmup) / static_cast<double>(t_max - warmup);
  return initial_lr - (initial_lr - eta_min) * fraction;
}

double WsdSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  std::int64_t warmup = warmup_.resolve(t_max);
  if (current <= warmup) return linear_warmup(initial_lr, current, warmup, warmup_.min_lr);
  std::int64_t decay = decay_.resolve(t_max);
  if (current >= t_max - decay)
    return linear_decay(initial_lr, t_max - current, decay, decay_min_lr_);
  return initial_lr;
}

double InvSqrtWithWarmupSchedule::lr(double initial_lr, std::int64_t current,
                                     std::int64_t t_max) const {
  std::int64_t warmup = warmup_.resolve(t_max);
  if (current < warmup) return linear_warmup(initial_lr, current, warmup, warmup_.min_lr);
  if (current <= 0) return initial_lr;  // a zero warmup at step 0: OLMo-core divides 0 by 0
  double eta_min = initial_lr * alpha_f_;
  return eta_min + (initial_lr - eta_min) *
                       std::sqrt(static_cast<double>(warmup) / static_cast<double>(current));
}

double PowerLrSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  std::int64_t warmup = warmup_.resolve(t_max);
  std::int64_t decay = decay_.resolve(t_max);
  if (current <= warmup) return linear_warmup(initial_lr, current, warmup, warmup_.min_lr);
  TANDEM_CHECK(warmup > 0,
               "schedule power_lr: the warmup is 0 steps, and the power law divides by it "
               "(lr x (current / warmup)^b)");
  if (current >= t_max - decay) {
    double tail_start =
        initial_lr * std::pow(static_cast<double>(t_max - decay) / static_cast<double>(warmup), b_);
    return linear_decay(tail_start, t_max - current, decay, decay_min_lr_);
  }
  return initial_lr * std::pow(static_cast<double>(current) / static_cast<double>(warmup), b_);
}

double CosWithWarmupAndLinearDecaySchedule::lr(double initial_lr, std::int64_t current,
                                               std::int64_t t_max) const {
  std::int64_t decay = decay_.resolve(t_max);
  if (current >= t_max - decay) {
    double final_cosine_lr = cosine_.lr(initial_lr, t_max - decay, t_max);
    return linear_decay(final_cosine_lr, t_max - current, decay, decay_min_lr_);
  }
  return cosine_.lr(initial_lr, current, t_max);
}

double ExponentialSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  if (current >= t_max) return initial_lr;
  if (current <= 0) return lr_min_;
  double ratio = static_cast<double>(current) / static_cast<double>(t_max);
  return lr_min_ * std::pow(initial_lr / lr_min_, ratio);
}

WsdsSchedule::WsdsSchedule(std::vector<std::int64_t> period_lengths,
                           std::vector<double> multipliers, WarmupSpec warmup, DecaySpec decay,
                           double decay_min_lr)
    : lengths_(std::move(period_lengths)),
      multipliers_(std::move(multipliers)),
      warmup_min_lr_(warmup.min_lr),
      decay_(decay),
      decay_min_lr_(decay_min_lr) {
  TANDEM_CHECK(!lengths_.empty(), "schedule wsds: period_lengths is empty");
  // The warmup fraction is of the first period.
  warmup_ = warmup.resolve(lengths_[0]);
  const std::int64_t first_decay = decay_.resolve(lengths_[0]);
  TANDEM_CHECK(warmup_ + first_decay <= lengths_[0],
               "schedule wsds: the first period's warmup ({}) and decay ({}) exceed its length {}",
               warmup_, first_decay, lengths_[0]);
  for (std::size_t i = 1; i < lengths_.size(); ++i)
    TANDEM_CHECK(decay_.resolve(lengths_[i]) <= lengths_[i],
                 "schedule wsds: period {}'s decay ({}) exceeds its length {}", i,
                 decay_.resolve(lengths_[i]), lengths_[i]);
  adjusted_lengths_ = lengths_;
  adjusted_lengths_[0] -= warmup_;
  std::int64_t end = 0;
  for (std::int64_t length : adjusted_lengths_) period_ends_.push_back(end += length);
}

double WsdsSchedule::peak(double initial_lr, std::size_t period) const {
  return multipliers_.empty() ? initial_lr : initial_lr * multipliers_[period];
}

double WsdsSchedule::lr(double initial_lr, std::int64_t current, std::int64_t) const {
  if (current < warmup_)
    return linear_warmup(peak(initial_lr, 0), current, warmup_, warmup_min_lr_);
  const std::int64_t adjusted = current - warmup_;
  if (adjusted >= period_ends_.back()) return decay_min_lr_;
  // The first period whose end is at or after `adjusted` (an end belongs to its period).
  std::size_t p = 0;
  while (p + 1 < period_ends_.size() && adjusted > period_ends_[p]) ++p;
  const std::int64_t start = p == 0 ? 0 : period_ends_[p - 1];
  const std::int64_t length = adjusted_lengths_[p];
  const std::int64_t pos = std::clamp<std::int64_t>(adjusted - start, 0, length);
  const std::int64_t decay = decay_.resolve(lengths_[p]);
  const std::int64_t stable = length - decay;
  if (pos < stable) return peak(initial_lr, p);
  return linear_decay(peak(initial_lr, p), decay - (pos - stable), decay, decay_min_lr_);
}

double scheduled_lr(const Schedule& schedule, double initial_lr, std::int64_t step,
                    const TrainingHorizon& horizon) {
  if (schedule.units() == ScheduleUnits::kSteps)
    return schedule.lr(initial_lr, step, horizon.max_steps);
  TANDEM_CHECK(horizon.global_batch_tokens > 0,
               "scheduler.units: tokens needs the global batch size");
  return schedule.lr(initial_lr, step * horizon.global_batch_tokens, horizon.max_tokens);
}

}  // namespace tandem::optim
