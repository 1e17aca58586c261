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
  // Past t_max OLMo-core would extrapolate below min_lr (even negative); we hold min_lr.
  steps_from_end = std::clamp<std::int64_t>(steps_from_end, 0, decay);
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
  std::int64_t decay = decay_ ? *decay_
                              : static_cast<std::int64_t>(std::nearbyint(
                                    static_cast<double>(t_max) * decay_fraction_.value()));
  if (current >= t_max - decay)
    return linear_decay(initial_lr, t_max - current, decay, decay_min_lr_);
  return initial_lr;
}

double StitchedSchedule::lr(double initial_lr, std::int64_t current, std::int64_t t_max) const {
  return current <= switch_step_ ? first_->lr(initial_lr, current, t_max)
                                 : second_->lr(initial_lr, current, t_max);
}

namespace {

std::int64_t non_negative_int(io::ConfigSection& s, const std::string& key) {
  std::int64_t v = s.get_int(key);
  TANDEM_CHECK(v >= 0, "{} must be >= 0, got {}", s.where(key), v);
  return v;
}

double fraction_in_unit_interval(io::ConfigSection& s, const std::string& key) {
  double v = s.get_double(key);
  TANDEM_CHECK(v >= 0.0 && v <= 1.0, "{} must be between 0 and 1, got {}", s.where(key), v);
  return v;
}

// `warmup` (OLMo-core's deprecated spelling `warmup_steps` is accepted too) or `warmup_fraction`.
WarmupSpec read_warmup(io::ConfigSection& s, bool required) {
  WarmupSpec w;
  TANDEM_CHECK(!(s.has("warmup") && s.has("warmup_steps")),
               "{}: give 'warmup' or 'warmup_steps', not both", s.where(""));
  std::string steps_key = s.has("warmup_steps") ? "warmup_steps" : "warmup";
  s.mark_used("warmup");
  s.mark_used("warmup_steps");
  s.mark_used("warmup_fraction");
  if (s.has(steps_key)) w.steps = non_negative_int(s, steps_key);
  if (s.has("warmup_fraction")) w.fraction = fraction_in_unit_interval(s, "warmup_fraction");
  TANDEM_CHECK(!(w.steps && w.fraction), "{}: give '{}' or 'warmup_fraction', not both",
               s.where(""), steps_key);
  if (!w.steps && !w.fraction) {
    TANDEM_CHECK(!required, "{}: one of 'warmup' or 'warmup_fraction' is required", s.where(""));
    w.steps = 0;
  }
  w.min_lr = s.get_double("warmup_min_lr", 0.0);
  TANDEM_CHECK(w.min_lr >= 0.0, "{} must be >= 0, got {}", s.where("warmup_min_lr"), w.min_lr);
  return w;
}

double read_alpha_f(io::ConfigSection& s, double fallback = 0.1 /* OLMo-core's default */) {
  double a = s.get_double("alpha_f", fallback);
  TANDEM_CHECK(a >= 0.0 && a <= 1.0, "{} must be between 0 and 1, got {}", s.where("alpha_f"), a);
  return a;
}

std::optional<std::int64_t> read_t_max(io::ConfigSection& s) {
  std::optional<std::int64_t> t = s.get_optional_int("t_max");
  TANDEM_CHECK(!t || *t > 0, "{} must be > 0, got {}", s.where("t_max"), t.value_or(0));
  return t;
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(io::ConfigSection s) {
  std::string name = s.get_string("name");
  std::string units = s.get_string("units", "steps");
  TANDEM_CHECK(units == "steps" || units == "tokens", "{}: expected 'steps' or 'tokens', got '{}'",
               s.where("units"), units);
  std::unique_ptr<Schedule> out;
  if (name == "constant") {
    out = std::make_unique<ConstantSchedule>();
  } else if (name == "constant_with_warmup") {
    out = std::make_unique<ConstantWithWarmupSchedule>(read_warmup(s, true));
  } else if (name == "cos_with_warmup" || name == "cosine_with_warmup") {
    WarmupSpec w = read_warmup(s, true);
    double alpha_f = read_alpha_f(s);
    out = std::make_unique<CosWithWarmupSchedule>(w, alpha_f, read_t_max(s));
  } else if (name == "half_cos_with_warmup" || name == "half_cosine_with_warmup") {
    WarmupSpec w = read_warmup(s, true);
    double alpha_f = read_alpha_f(s);
    out = std::make_unique<HalfCosWithWarmupSchedule>(w, alpha_f, read_t_max(s));
  } else if (name == "linear_with_warmup" || name == "linear") {
    // "linear" is the stage-2 anneal: warmup optional and decay to zero unless alpha_f is given.
    bool plain = name == "linear";
    WarmupSpec w = read_warmup(s, !plain);
    double alpha_f = read_alpha_f(s, plain ? 0.0 : 0.1);
    out = std::make_unique<LinearWithWarmupSchedule>(w, alpha_f, read_t_max(s));
  } else if (name == "wsd") {
    WarmupSpec w = read_warmup(s, true);
    TANDEM_CHECK(!(s.has("decay") && s.has("decay_fraction")),
                 "{}: give 'decay' or 'decay_fraction', not both", s.where(""));
    std::optional<std::int64_t> decay;
    std::optional<double> decay_fraction;
    s.mark_used("decay");
    s.mark_used("decay_fraction");
    if (s.has("decay"))
      decay = non_negative_int(s, "decay");
    else if (s.has("decay_fraction"))
      decay_fraction = fraction_in_unit_interval(s, "decay_fraction");
    else
      decay_fraction = 0.1;  // OLMo-core's default
    double decay_min_lr = s.get_double("decay_min_lr", 0.0);
    TANDEM_CHECK(decay_min_lr >= 0.0, "{} must be >= 0, got {}", s.where("decay_min_lr"),
                 decay_min_lr);
    out = std::make_unique<WsdSchedule>(w, decay, decay_fraction, decay_min_lr);
  } else if (name == "stitched") {
    std::int64_t switch_step = non_negative_int(s, "switch_step");
    TANDEM_CHECK(s.has("first") && s.has("second"),
                 "{}: a stitched schedule needs 'first' and 'second'", s.where(""));
    auto first = make_schedule(s.section("first"));
    auto second = make_schedule(s.section("second"));
    out = std::make_unique<StitchedSchedule>(std::move(first), switch_step, std::move(second));
  } else {
    core::fail(
        "{}: unknown schedule '{}' (expected constant, constant_with_warmup, cos_with_warmup, "
        "half_cos_with_warmup, linear_with_warmup, wsd or stitched)",
        s.where("name"), name);
  }
  out->set_units(units == "tokens" ? ScheduleUnits::kTokens : ScheduleUnits::kSteps);
  s.finish();
  return out;
}

double scheduled_lr(const Schedule& schedule, double initial_lr, std::int64_t step,
                    std::int64_t max_steps, std::int64_t global_batch_tokens) {
  if (schedule.units() == ScheduleUnits::kSteps) return schedule.lr(initial_lr, step, max_steps);
  TANDEM_CHECK(global_batch_tokens > 0, "scheduler.units: tokens needs the global batch size");
  return schedule.lr(initial_lr, step * global_batch_tokens, max_steps * global_batch_tokens);
}

}  // namespace tandem::optim
