// Schedules made of other schedules or of stages (OLMo-core's SequentialScheduler and
// ComposableScheduler, and the stitched schedule AI2's OLMo 3 7B stage 1 amounted to). Built by
// make_schedule (schedule.h) from their config sections.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tandem/optim/schedule.h"

namespace tandem::optim {

// How a stage goes from its start lr to its end lr (OLMo-core's ComposableSchedulerStageType).
enum class LrShape { kLinear, kCosine };

// An lr given outright or as a fraction of the peak lr (OLMo-core's `end_lr` / `end_lr_fraction`).
struct LrTarget {
  std::optional<double> value;
  std::optional<double> fraction;
  double resolve(double initial_lr) const { return value ? *value : initial_lr * *fraction; }
};

// OLMo-core's OverrideDecay: from `start` on the main schedule is left; the lr goes from the value
// the main schedule has at `start` to `end` over `duration`, then stays at `end`.
struct OverrideDecay {
  std::int64_t start = 0;
  std::int64_t duration = 1;
  LrShape shape = LrShape::kLinear;
  LrTarget end;
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

// OLMo-core's SequentialScheduler: schedule i runs for the first ends[i] steps left to it (it
// sees its own step count and min(t_max, ends[i]) as horizon), the next starts from the lr the
// previous reaches at its end, the last runs to the trainer's t_max. An optional override decay
// as in ComposableSchedule. OLMo-core asserts current <= t_max; past t_max this holds the value
// at t_max.
class SequentialSchedule : public Schedule {
 public:
  SequentialSchedule(std::vector<std::unique_ptr<Schedule>> schedules,
                     std::vector<std::int64_t> ends, std::optional<OverrideDecay> override_decay)
      : schedules_(std::move(schedules)),
        ends_(std::move(ends)),
        override_(std::move(override_decay)) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  double sequence_lr(double initial_lr, std::int64_t current, std::int64_t t_max) const;
  std::vector<std::unique_ptr<Schedule>> schedules_;
  std::vector<std::int64_t> ends_;  // one fewer than schedules_
  std::optional<OverrideDecay> override_;
};

// OLMo-core's ComposableScheduler: stages of fixed durations, each linear or cosine from its start
// lr (by default the previous stage's end, the peak lr for the first) to its end lr; after the
// last stage its end lr. Fixed durations: t_max is ignored.
class ComposableSchedule : public Schedule {
 public:
  struct Stage {
    std::int64_t duration = 1;
    LrShape shape = LrShape::kLinear;
    std::optional<LrTarget> start;
    LrTarget end;
  };
  ComposableSchedule(std::vector<Stage> stages, std::optional<OverrideDecay> override_decay)
      : stages_(std::move(stages)), override_(std::move(override_decay)) {}
  double lr(double initial_lr, std::int64_t current, std::int64_t t_max) const override;

 private:
  double stages_lr(double initial_lr, std::int64_t current) const;
  std::vector<Stage> stages_;
  std::optional<OverrideDecay> override_;
};

}  // namespace tandem::optim
