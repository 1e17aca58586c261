// make_schedule: a `scheduler:` section (OLMo-core's scheduler names and fields) to a Schedule.
#include <functional>
#include <map>

#include "tandem/core/error.h"
#include "tandem/optim/schedule.h"
#include "tandem/optim/schedule_composite.h"

namespace tandem::optim {
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

// `decay` (or OLMo-core's older `decay_steps`) or `decay_fraction`, never both; without either,
// `default_fraction` (OLMo-core's 0.1) where the schedule has one, else an error.
DecaySpec read_decay(io::ConfigSection& s, std::optional<double> default_fraction) {
  TANDEM_CHECK(!(s.has("decay") && s.has("decay_steps")),
               "{}: give 'decay' or 'decay_steps', not both", s.where(""));
  const std::string steps_key = s.has("decay_steps") ? "decay_steps" : "decay";
  s.mark_used("decay");
  s.mark_used("decay_steps");
  s.mark_used("decay_fraction");
  TANDEM_CHECK(!(s.has(steps_key) && s.has("decay_fraction")),
               "{}: give '{}' or 'decay_fraction', not both", s.where(""), steps_key);
  DecaySpec d;
  if (s.has(steps_key))
    d.steps = non_negative_int(s, steps_key);
  else if (s.has("decay_fraction"))
    d.fraction = fraction_in_unit_interval(s, "decay_fraction");
  else if (default_fraction)
    d.fraction = default_fraction;
  else
    core::fail("{}: one of 'decay' or 'decay_fraction' is required", s.where(""));
  return d;
}

double read_min_lr(io::ConfigSection& s, const std::string& key) {
  double v = s.get_double(key, 0.0);
  TANDEM_CHECK(v >= 0.0, "{} must be >= 0, got {}", s.where(key), v);
  return v;
}

// An lr as `<prefix>_lr` or `<prefix>_lr_fraction` (of the peak lr), at most one; nullopt if
// neither.
std::optional<LrTarget> read_lr_target(io::ConfigSection& s, const std::string& prefix) {
  const std::string value_key = prefix + "_lr", fraction_key = prefix + "_lr_fraction";
  s.mark_used(value_key);
  s.mark_used(fraction_key);
  const bool value = s.has(value_key) && !s.raw(value_key).IsNull();
  const bool fraction = s.has(fraction_key) && !s.raw(fraction_key).IsNull();
  TANDEM_CHECK(!(value && fraction), "{}: give '{}' or '{}', not both", s.where(""), value_key,
               fraction_key);
  if (!value && !fraction) return std::nullopt;
  LrTarget t;
  const std::string& key = value ? value_key : fraction_key;
  const double v = s.get_double(key);
  TANDEM_CHECK(v >= 0.0, "{} must be >= 0, got {}", s.where(key), v);
  (value ? t.value : t.fraction) = v;
  return t;
}

LrTarget read_end_lr(io::ConfigSection& s) {
  std::optional<LrTarget> t = read_lr_target(s, "end");
  TANDEM_CHECK(t.has_value(), "{}: one of 'end_lr' or 'end_lr_fraction' is required", s.where(""));
  return *t;
}

LrShape read_shape(io::ConfigSection& s) {
  const std::string shape = s.get_string("shape", "linear");
  TANDEM_CHECK(shape == "linear" || shape == "cosine",
               "{}: expected 'linear' or 'cosine', got '{}'", s.where("shape"), shape);
  return shape == "cosine" ? LrShape::kCosine : LrShape::kLinear;
}

std::int64_t positive_int(io::ConfigSection& s, const std::string& key) {
  std::int64_t v = s.get_int(key);
  TANDEM_CHECK(v > 0, "{} must be > 0, got {}", s.where(key), v);
  return v;
}

// `override_decay:` of the sequential and composable schedules (absent or null: none).
std::optional<OverrideDecay> read_override_decay(io::ConfigSection& s) {
  if (!s.has("override_decay") || s.raw("override_decay").IsNull()) {
    s.mark_used("override_decay");
    return std::nullopt;
  }
  io::ConfigSection o = s.section("override_decay");
  OverrideDecay d;
  d.start = non_negative_int(o, "start");
  d.duration = positive_int(o, "duration");
  d.shape = read_shape(o);
  d.end = read_end_lr(o);
  o.finish();
  return d;
}

std::unique_ptr<Schedule> make_wsd(io::ConfigSection& s) {
  WarmupSpec w = read_warmup(s, true);
  DecaySpec d = read_decay(s, 0.1);
  return std::make_unique<WsdSchedule>(w, d, read_min_lr(s, "decay_min_lr"));
}

std::unique_ptr<Schedule> make_power_lr(io::ConfigSection& s) {
  WarmupSpec w = read_warmup(s, true);
  const double b = s.get_double("b", -0.51);  // OLMo-core's default
  TANDEM_CHECK(b < 0.0, "{} must be negative (a decaying power law), got {}", s.where("b"), b);
  DecaySpec d = read_decay(s, 0.1);
  return std::make_unique<PowerLrSchedule>(w, b, d, read_min_lr(s, "decay_min_lr"));
}

std::unique_ptr<Schedule> make_cos_with_linear_decay(io::ConfigSection& s) {
  WarmupSpec w = read_warmup(s, true);
  double alpha_f = read_alpha_f(s);
  CosWithWarmupSchedule cosine(w, alpha_f, read_t_max(s));
  DecaySpec d = read_decay(s, 0.1);
  return std::make_unique<CosWithWarmupAndLinearDecaySchedule>(std::move(cosine), d,
                                                               read_min_lr(s, "decay_min_lr"));
}

std::unique_ptr<Schedule> make_exponential(io::ConfigSection& s) {
  const double lr_min = s.get_double("lr_min", 1e-9);  // OLMo-core's default
  TANDEM_CHECK(lr_min > 0.0, "{} must be > 0, got {}", s.where("lr_min"), lr_min);
  return std::make_unique<ExponentialSchedule>(lr_min);
}

std::unique_ptr<Schedule> make_wsds(io::ConfigSection& s) {
  std::vector<std::int64_t> lengths = s.get_int_list("period_lengths");
  TANDEM_CHECK(!lengths.empty(), "{} must not be empty", s.where("period_lengths"));
  for (std::int64_t l : lengths)
    TANDEM_CHECK(l > 0, "{}: every period length must be > 0, got {}", s.where("period_lengths"),
                 l);
  std::vector<double> multipliers;
  s.mark_used("period_lr_multipliers");
  if (s.has("period_lr_multipliers") && !s.raw("period_lr_multipliers").IsNull()) {
    multipliers = s.get_double_list("period_lr_multipliers");
    TANDEM_CHECK(multipliers.size() == lengths.size(), "{}: {} multipliers for {} periods",
                 s.where("period_lr_multipliers"), multipliers.size(), lengths.size());
    for (double m : multipliers)
      TANDEM_CHECK(m > 0.0, "{}: every multiplier must be > 0, got {}",
                   s.where("period_lr_multipliers"), m);
  }
  WarmupSpec w = read_warmup(s, true);
  DecaySpec d = read_decay(s, std::nullopt);
  try {
    return std::make_unique<WsdsSchedule>(std::move(lengths), std::move(multipliers), w, d,
                                          read_min_lr(s, "decay_min_lr"));
  } catch (const core::Error& e) {
    core::fail("{}: {}", s.where(""), e.what());
  }
}

std::unique_ptr<Schedule> make_stitched(io::ConfigSection& s) {
  std::int64_t switch_step = non_negative_int(s, "switch_step");
  TANDEM_CHECK(s.has("first") && s.has("second"),
               "{}: a stitched schedule needs 'first' and 'second'", s.where(""));
  auto first = make_schedule(s.section("first"));
  auto second = make_schedule(s.section("second"));
  return std::make_unique<StitchedSchedule>(std::move(first), switch_step, std::move(second));
}

// OLMo-core's SequentialScheduler: `schedulers` (nested sections; their own `units` is not used,
// the sequence's is), `schedulers_max` (or the older `schedulers_max_steps`) for all but the last
// (a value given for the last is dropped, as OLMo-core does), `override_decay`.
std::unique_ptr<Schedule> make_sequential(io::ConfigSection& s) {
  std::vector<std::unique_ptr<Schedule>> schedules;
  for (io::ConfigSection& sub : s.section_list("schedulers"))
    schedules.push_back(make_schedule(sub));
  TANDEM_CHECK(!schedules.empty(), "{} must not be empty", s.where("schedulers"));
  TANDEM_CHECK(!(s.has("schedulers_max") && s.has("schedulers_max_steps")),
               "{}: give 'schedulers_max' or 'schedulers_max_steps', not both", s.where(""));
  const std::string key = s.has("schedulers_max_steps") ? "schedulers_max_steps" : "schedulers_max";
  s.mark_used("schedulers_max");
  s.mark_used("schedulers_max_steps");
  std::vector<std::int64_t> ends = s.get_int_list(key);
  if (ends.size() == schedules.size()) ends.pop_back();
  TANDEM_CHECK(ends.size() + 1 == schedules.size(),
               "{}: {} values for {} schedulers (every scheduler but the last needs one)",
               s.where(key), ends.size(), schedules.size());
  for (std::int64_t e : ends)
    TANDEM_CHECK(e > 0, "{}: every value must be > 0, got {}", s.where(key), e);
  return std::make_unique<SequentialSchedule>(std::move(schedules), std::move(ends),
                                              read_override_decay(s));
}

std::unique_ptr<Schedule> make_composable(io::ConfigSection& s) {
  std::vector<ComposableSchedule::Stage> stages;
  for (io::ConfigSection& st : s.section_list("stages")) {
    ComposableSchedule::Stage stage;
    stage.duration = positive_int(st, "duration");
    stage.shape = read_shape(st);
    stage.start = read_lr_target(st, "start");
    stage.end = read_end_lr(st);
    st.finish();
    stages.push_back(stage);
  }
  TANDEM_CHECK(!stages.empty(), "{} must not be empty", s.where("stages"));
  return std::make_unique<ComposableSchedule>(std::move(stages), read_override_decay(s));
}

std::unique_ptr<Schedule> make_linear(io::ConfigSection& s, bool plain) {
  // "linear" is the stage-2 anneal: warmup optional and decay to zero unless alpha_f is given.
  WarmupSpec w = read_warmup(s, !plain);
  double alpha_f = read_alpha_f(s, plain ? 0.0 : 0.1);
  return std::make_unique<LinearWithWarmupSchedule>(w, alpha_f, read_t_max(s));
}

using Maker = std::function<std::unique_ptr<Schedule>(io::ConfigSection&)>;

const std::map<std::string, Maker>& makers() {
  static const std::map<std::string, Maker> table = {
      {"constant", [](io::ConfigSection&) { return std::make_unique<ConstantSchedule>(); }},
      {"constant_with_warmup",
       [](io::ConfigSection& s) {
         return std::make_unique<ConstantWithWarmupSchedule>(read_warmup(s, true));
       }},
      {"cos_with_warmup",
       [](io::ConfigSection& s) {
         WarmupSpec w = read_warmup(s, true);
         double alpha_f = read_alpha_f(s);
         return std::make_unique<CosWithWarmupSchedule>(w, alpha_f, read_t_max(s));
       }},
      {"half_cos_with_warmup",
       [](io::ConfigSection& s) {
         WarmupSpec w = read_warmup(s, true);
         double alpha_f = read_alpha_f(s);
         return std::make_unique<HalfCosWithWarmupSchedule>(w, alpha_f, read_t_max(s));
       }},
      {"linear_with_warmup", [](io::ConfigSection& s) { return make_linear(s, false); }},
      {"linear", [](io::ConfigSection& s) { return make_linear(s, true); }},
      {"inv_sqrt_with_warmup",
       [](io::ConfigSection& s) {
         WarmupSpec w = read_warmup(s, true);
         return std::make_unique<InvSqrtWithWarmupSchedule>(w, read_alpha_f(s));
       }},
      {"wsd", make_wsd},
      {"power_lr", make_power_lr},
      {"cos_with_warmup_and_linear_decay", make_cos_with_linear_decay},
      {"exponential", make_exponential},
      {"wsds", make_wsds},
      {"stitched", make_stitched},
      {"sequential", make_sequential},
      {"composable", make_composable},
  };
  return table;
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {
      {"cosine_with_warmup", "cos_with_warmup"},
      {"half_cosine_with_warmup", "half_cos_with_warmup"}};
  return table;
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(io::ConfigSection s) {
  std::string name = s.get_string("name");
  std::string units = s.get_string("units", "steps");
  TANDEM_CHECK(units == "steps" || units == "tokens", "{}: expected 'steps' or 'tokens', got '{}'",
               s.where("units"), units);
  if (auto a = aliases().find(name); a != aliases().end()) name = a->second;
  auto maker = makers().find(name);
  if (maker == makers().end()) {
    std::string known;
    for (const auto& [n, _] : makers()) known += (known.empty() ? "" : ", ") + n;
    core::fail("{}: unknown schedule '{}' (expected one of {})", s.where("name"), name, known);
  }
  std::unique_ptr<Schedule> out = maker->second(s);
  out->set_units(units == "tokens" ? ScheduleUnits::kTokens : ScheduleUnits::kSteps);
  s.finish();
  return out;
}

}  // namespace tandem::optim
