#include "tandem/optim/schedule_composite.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tandem::optim {
namespace {

// OLMo-core's _interpolate_lr, in its operation order.
double interpolate(LrShape shape, double start_lr, double end_lr, std::int64_t current,
                   std::int64_t duration) {
  if (shape == LrShape::kLinear)
    return start_lr +
           (end_lr - start_lr) * static_cast<double>(current) / static_cast<double>(duration);
  return end_lr + (start_lr - end_lr) *
                      (1.0 + std::cos(std::numbers::pi * static_cast<double>(current) /
                                      static_cast<double>(duration))) /
                      2.0;
}

// The override decay past its start: from the main schedule's lr at `start` to its end lr.
double override_lr(const OverrideDecay& o, double start_lr, double initial_lr,
                   std::int64_t current) {
  const double end_lr = o.end.resolve(initial_lr);
  const std::int64_t into = current - o.start;
  if (into < o.duration) return interpolate(o.shape, start_lr, end_lr, into, o.duration);
  return end_lr;
}

}  // namespace

double StitchedSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  return current <= switch_step_ ? first_->lr(initial_lr, current, t_max)
                                 : second_->lr(initial_lr, current, t_max);
}

double SequentialSchedule::sequence_lr(double initial_lr, std::int64_t current,
                                       std::int64_t t_max) const {
  for (std::size_t i = 0; i < ends_.size(); ++i) {
    if (current <= ends_[i])
      return schedules_[i]->lr(initial_lr, current, std::min(t_max, ends_[i]));
    // The next schedule peaks where this one ends.
    initial_lr = schedules_[i]->lr(initial_lr, ends_[i], ends_[i]);
    current -= ends_[i];
    t_max -= ends_[i];
  }
  return schedules_.back()->lr(initial_lr, current, t_max);
}

double SequentialSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  current = std::clamp<std::int64_t>(current, 0, t_max);
  if (!override_ || current < override_->start) return sequence_lr(initial_lr, current, t_max);
  return override_lr(*override_, sequence_lr(initial_lr, override_->start, t_max), initial_lr,
                     current);
}

double ComposableSchedule::stages_lr(double initial_lr, std::int64_t current) const {
  current = std::max<std::int64_t>(current, 0);
  std::int64_t stage_start = 0;
  double previous_end = initial_lr;
  for (const Stage& stage : stages_) {
    const double start_lr = stage.start ? stage.start->resolve(initial_lr) : previous_end;
    const double end_lr = stage.end.resolve(initial_lr);
    const std::int64_t stage_end = stage_start + stage.duration;
    if (current < stage_end)
      return interpolate(stage.shape, start_lr, end_lr, current - stage_start, stage.duration);
    previous_end = end_lr;
    stage_start = stage_end;
  }
  return previous_end;
}

double ComposableSchedule::lr(double initial_lr, std::int64_t current, std::int64_t) const {
  current = std::max<std::int64_t>(current, 0);
  if (!override_ || current < override_->start) return stages_lr(initial_lr, current);
  return override_lr(*override_, stages_lr(initial_lr, override_->start), initial_lr, current);
}

}  // namespace tandem::optim
