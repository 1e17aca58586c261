#include "tandem/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fixture.h"
#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

std::unique_ptr<Schedule> from_yaml(const std::string& text) {
  return make_schedule(io::ConfigSection(YAML::Load(text), "scheduler", "test.yaml"));
}

// OLMo-core's classes evaluated at many steps (boundaries included) by the real package.
TEST(ScheduleParity, MatchesOlmoCoreAtEveryProbedStep) {
  nlohmann::json fixture = testing::load_fixture("schedules.json");
  ASSERT_GE(fixture["cases"].size(), 10u);
  std::size_t compared = 0;
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    // JSON is YAML, so the recorded config goes through the real YAML config reader.
    auto schedule = from_yaml(c["config"].dump());
    const double initial_lr = c["initial_lr"].get<double>();
    const std::int64_t t_max = c["t_max"].get<std::int64_t>();
    const auto& steps = c["steps"];
    const auto& expected = c["lr"];
    ASSERT_EQ(steps.size(), expected.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::int64_t step = steps[i].get<std::int64_t>();
      const double want = expected[i].get<double>();
      const double got = schedule->lr(initial_lr, step, t_max);
      // Same formulas in the same order in double: agreement to ~1e-12 relative (cos() of the
      // C library and of CPython's libm may differ in the last bit).
      const double tol = 1e-12 * std::abs(want) + 1e-300;
      EXPECT_NEAR(got, want, tol) << "step " << step;
      if (want != 0.0) worst = std::max(worst, std::abs(got - want) / std::abs(want));
      ++compared;
    }
    EXPECT_LT(worst, 1e-12);
  }
  EXPECT_GT(compared, 500u);
}

TEST(Schedule, CosineBoundaries) {
  auto s = from_yaml("{name: cos_with_warmup, warmup: 100, alpha_f: 0.1}");
  const double lr = 3e-4;
  EXPECT_EQ(s->lr(lr, 0, 1000), 0.0);                           // step 0: start of warmup
  EXPECT_DOUBLE_EQ(s->lr(lr, 50, 1000), lr / 2);                // half-way through warmup
  EXPECT_DOUBLE_EQ(s->lr(lr, 100, 1000), lr);                   // warmup end: the peak
  EXPECT_DOUBLE_EQ(s->lr(lr, 550, 1000), (lr + 0.1 * lr) / 2);  // cosine midpoint
  EXPECT_DOUBLE_EQ(s->lr(lr, 1000, 1000), 0.1 * lr);            // t_max: the floor
  EXPECT_DOUBLE_EQ(s->lr(lr, 5000, 1000), 0.1 * lr);            // beyond t_max: stays at the floor
  EXPECT_LT(s->lr(lr, 101, 1000), lr);
}

TEST(Schedule, WarmupMinLrAndFraction) {
  auto s = from_yaml("{name: cos_with_warmup, warmup_fraction: 0.1, warmup_min_lr: 1e-5}");
  EXPECT_DOUBLE_EQ(s->lr(1e-3, 0, 1000), 1e-5);
  EXPECT_DOUBLE_EQ(s->lr(1e-3, 100, 1000), 1e-3);
  // round(t_max * fraction) is half-to-even as in Python: 25 * 0.1 = 2.5 -> 2.
  auto r = from_yaml("{name: constant_with_warmup, warmup_fraction: 0.1}");
  EXPECT_DOUBLE_EQ(r->lr(1.0, 2, 25), 1.0);
  EXPECT_DOUBLE_EQ(r->lr(1.0, 1, 25), 0.5);
}

TEST(Schedule, HalfCosineStartsAtTheMidpointAndEndsAtTheFloor) {
  auto s = from_yaml("{name: half_cos_with_warmup, warmup: 200, alpha_f: 0.1}");
  const double lr = 1.0, mid = 0.55;
  EXPECT_DOUBLE_EQ(s->lr(lr, 100, 1000), mid / 2);  // warmup ramps to the midpoint
  EXPECT_DOUBLE_EQ(s->lr(lr, 200, 1000), mid);
  EXPECT_DOUBLE_EQ(s->lr(lr, 1000, 1000), 0.1);
  EXPECT_DOUBLE_EQ(s->lr(lr, 2000, 1000), 0.1);
}

TEST(Schedule, StitchedOlmo3ScheduleIsContinuousAtTheSwitch) {
  auto s = from_yaml(
      "{name: stitched, switch_step: 597046,"
      " first: {name: cos_with_warmup, warmup: 2000, alpha_f: 0.1, t_max: 1192093},"
      " second: {name: half_cos_with_warmup, warmup: 597046, alpha_f: 0.1}}");
  const double lr = 3e-4;
  const std::int64_t t_max = 1668931;
  // Continuous at the switch (the slope changes: the half-cosine is stretched to the 7T horizon):
  // the step across it is no larger than one step of the first cosine plus one of the second.
  const double slope_before = s->lr(lr, 597045, t_max) - s->lr(lr, 597046, t_max);
  const double slope_after = s->lr(lr, 597047, t_max) - s->lr(lr, 597048, t_max);
  const double across = s->lr(lr, 597046, t_max) - s->lr(lr, 597047, t_max);
  EXPECT_GT(slope_after, 0.0);
  EXPECT_LT(slope_after, slope_before);
  EXPECT_GT(across, 0.0);
  EXPECT_LE(across, 1.01 * (0.5 * slope_before + slope_after));
  EXPECT_DOUBLE_EQ(s->lr(lr, 2000, t_max), lr);
  EXPECT_DOUBLE_EQ(s->lr(lr, t_max, t_max), 0.1 * lr);
  // The first part alone would have reached its floor at 1,192,093; the stitched one has not.
  EXPECT_GT(s->lr(lr, 1192093, t_max), 0.1 * lr * 1.5);
}

TEST(Schedule, LinearAndWsdBoundaries) {
  auto lin = from_yaml("{name: linear}");  // stage 2: no warmup, decay to 0
  EXPECT_DOUBLE_EQ(lin->lr(2.0712e-4, 0, 100), 2.0712e-4);
  EXPECT_DOUBLE_EQ(lin->lr(2.0712e-4, 50, 100), 2.0712e-4 / 2);
  EXPECT_EQ(lin->lr(2.0712e-4, 100, 100), 0.0);
  EXPECT_EQ(lin->lr(2.0712e-4, 150, 100), 0.0);
  auto wsd = from_yaml("{name: wsd, warmup: 10, decay: 20, decay_min_lr: 0.1}");
  EXPECT_DOUBLE_EQ(wsd->lr(1.0, 10, 100), 1.0);
  EXPECT_DOUBLE_EQ(wsd->lr(1.0, 79, 100), 1.0);
  EXPECT_DOUBLE_EQ(wsd->lr(1.0, 90, 100), 0.55);
  EXPECT_DOUBLE_EQ(wsd->lr(1.0, 100, 100), 0.1);
  // Past t_max it goes on below decay_min_lr (negative here), as OLMo-core's does.
  EXPECT_DOUBLE_EQ(wsd->lr(1.0, 130, 100), 0.1 - 0.9 * 30 / 20);
  auto constant = from_yaml("{name: constant}");
  EXPECT_EQ(constant->lr(3e-4, 0, 10), 3e-4);
  EXPECT_EQ(constant->lr(3e-4, 99, 10), 3e-4);
}

TEST(Schedule, UnitsKey) {
  EXPECT_EQ(from_yaml("{name: constant}")->units(), ScheduleUnits::kSteps);
  EXPECT_EQ(from_yaml("{name: constant, units: tokens}")->units(), ScheduleUnits::kTokens);
}

// units: tokens is what OLMo-core's trainer feeds its scheduler: tokens seen including this batch
// against max_steps x the global batch; warmup and t_max in tokens. A token schedule whose warmup
// is 10 batches is the step schedule with warmup 10.
TEST(Schedule, TokenUnitsFollowTheTokensSeen) {
  const std::int64_t batch = 4096, max_steps = 100;
  auto tokens = from_yaml("{name: cos_with_warmup, units: tokens, warmup: 40960, alpha_f: 0.1}");
  auto steps = from_yaml("{name: cos_with_warmup, warmup: 10, alpha_f: 0.1}");
  const TrainingHorizon horizon = TrainingHorizon::in_steps(max_steps, batch);
  for (std::int64_t s = 1; s <= max_steps + 2; ++s) {
    const double a = scheduled_lr(*tokens, 1e-3, s, horizon);
    const double b = scheduled_lr(*steps, 1e-3, s, horizon);
    EXPECT_NEAR(a, b, 1e-15) << "step " << s;
  }
  // A warmup that ends inside a batch: at step 3 (12,288 tokens) of a 10,000-token warmup the
  // warmup is over, where a step count would still be warming up.
  auto uneven = from_yaml("{name: constant_with_warmup, units: tokens, warmup: 10000}");
  EXPECT_DOUBLE_EQ(scheduled_lr(*uneven, 1e-3, 3, horizon), 1e-3);
  EXPECT_LT(scheduled_lr(*uneven, 1e-3, 2, horizon), 1e-3);
  EXPECT_THROW(scheduled_lr(*tokens, 1e-3, 1, TrainingHorizon::in_steps(max_steps, 0)),
               core::Error);
  // A duration in tokens (OLMo-core's Duration.tokens) is a token schedule's t_max as it is, not
  // rounded up to whole batches; a step schedule's t_max is the steps that reach it.
  const TrainingHorizon by_tokens{100, 99 * batch + 1000, batch};
  auto cosine = from_yaml("{name: cos_with_warmup, units: tokens, warmup: 0, alpha_f: 0.1}");
  EXPECT_EQ(scheduled_lr(*cosine, 1e-3, 50, by_tokens),
            cosine->lr(1e-3, 50 * batch, 99 * batch + 1000));
  EXPECT_EQ(scheduled_lr(*steps, 1e-3, 50, by_tokens), steps->lr(1e-3, 50, 100));
}

void expect_config_error(const std::string& yaml, const std::string& fragment) {
  try {
    from_yaml(yaml);
    ADD_FAILURE() << "no error for " << yaml;
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' lacks '" << fragment << "'";
    EXPECT_NE(std::string(e.what()).find("test.yaml"), std::string::npos) << e.what();
  }
}

TEST(ScheduleConfig, ErrorsNameTheKey) {
  expect_config_error("{name: cosine_forever}", "unknown schedule 'cosine_forever'");
  expect_config_error("{name: cos_with_warmup, warmup: 10, t_maks: 5}", "scheduler.t_maks");
  expect_config_error("{name: cos_with_warmup, warmup: -5}", "scheduler.warmup' must be >= 0");
  expect_config_error("{name: cos_with_warmup}", "one of 'warmup' or 'warmup_fraction'");
  expect_config_error("{name: cos_with_warmup, warmup: 5, warmup_fraction: 0.1}", "not both");
  expect_config_error("{name: cos_with_warmup, warmup: 5, warmup_steps: 5}", "not both");
  expect_config_error("{name: wsd, warmup: 5, warmup_fraction: 1.5}", "between 0 and 1");
  expect_config_error("{name: cos_with_warmup, warmup: 5, alpha_f: 2}", "scheduler.alpha_f");
  expect_config_error("{name: cos_with_warmup, warmup: 5, t_max: 0}", "scheduler.t_max");
  expect_config_error("{name: cos_with_warmup, warmup: abc}", "scheduler.warmup");
  expect_config_error("{warmup: 5}", "scheduler.name' is required");
  expect_config_error("{name: stitched, switch_step: 5, first: {name: constant}}",
                      "needs 'first' and 'second'");
  expect_config_error(
      "{name: stitched, switch_step: 5, first: {name: constant},"
      " second: {name: constant, extra: 1}}",
      "scheduler.second.extra");
  expect_config_error("{name: constant, units: epochs}", "scheduler.units");
}

// Past t_max (the last step of a duration in tokens that ends inside its batch) OLMo-core's linear
// decay tails go on below decay_min_lr, to negative lrs: tandem takes the same values. Expected:
// OLMo-core 3.0's WSD, PowerLR and CosWithWarmupAndLinearDecay (warmup 10, decay 20, decay_min_lr
// 1e-4) get_lr(1e-2, current, 100) at current 100, 101 and 110.
TEST(Schedule, DecayTailsGoOnPastTMaxAsOlmoCoresDo) {
  const struct {
    const char* yaml;
    double at_100, at_101, at_110;
  } cases[] = {
      {"{name: wsd, warmup: 10, decay: 20, decay_min_lr: 1e-4}", 1e-4, -0.000395, -0.00485},
      {"{name: power_lr, warmup: 10, decay: 20, decay_min_lr: 1e-4}", 1e-4, -6.813868351386559e-05,
       -0.0015813868351386557},
      {"{name: cos_with_warmup_and_linear_decay, warmup: 10, decay: 20, decay_min_lr: 1e-4}", 1e-4,
       2.3599997017700376e-06, -0.0008764000029822996},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto s = from_yaml(c.yaml);
    EXPECT_DOUBLE_EQ(s->lr(1e-2, 100, 100), c.at_100);
    EXPECT_DOUBLE_EQ(s->lr(1e-2, 101, 100), c.at_101);
    EXPECT_DOUBLE_EQ(s->lr(1e-2, 110, 100), c.at_110);
  }
}

// OLMo-core's sequential schedule asserts current <= t_max; tandem holds the value at t_max.
TEST(Schedule, SequentialHoldsItsValuePastTMax) {
  auto s = from_yaml(
      "{name: sequential, schedulers_max: [30],"
      " schedulers: [{name: constant_with_warmup, warmup: 10}, {name: linear}]}");
  const double at_end = s->lr(1e-2, 100, 100);
  EXPECT_GE(at_end, 0.0);
  EXPECT_EQ(s->lr(1e-2, 101, 100), at_end);
  EXPECT_EQ(s->lr(1e-2, 500, 100), at_end);
}

TEST(Schedule, PowerLawNeedsAWarmup) {
  auto s = from_yaml("{name: power_lr, warmup_fraction: 0.001}");  // rounds to 0 steps of 100
  EXPECT_EQ(s->lr(1e-3, 0, 100), 1e-3);
  EXPECT_THROW(s->lr(1e-3, 1, 100), core::Error);
}

TEST(Schedule, SequentialDropsTheLastSchedulersMaxAsOlmoCoreDoes) {
  auto a = from_yaml(
      "{name: sequential, schedulers_max: [10, 99],"
      " schedulers: [{name: constant_with_warmup, warmup: 10}, {name: linear}]}");
  auto b = from_yaml(
      "{name: sequential, schedulers_max_steps: [10],"
      " schedulers: [{name: constant_with_warmup, warmup: 10}, {name: linear}]}");
  for (std::int64_t step : {0, 5, 10, 11, 50, 100})
    EXPECT_EQ(a->lr(1.0, step, 100), b->lr(1.0, step, 100));
  EXPECT_DOUBLE_EQ(a->lr(1.0, 55, 100), 0.5);  // the linear part spans steps 10..100
}

TEST(ScheduleConfig, WsdsPeriodsMustHoldTheirWarmupAndDecay) {
  expect_config_error("{name: wsds, period_lengths: [100], warmup: 60, decay: 50}",
                      "first period's warmup (60) and decay (50) exceed its length 100");
  expect_config_error("{name: wsds, period_lengths: [100, 20], warmup: 10, decay: 30}",
                      "period 1's decay (30) exceeds its length 20");
  expect_config_error("{name: wsds, period_lengths: [100], warmup: 10}",
                      "one of 'decay' or 'decay_fraction' is required");
  expect_config_error(
      "{name: wsds, period_lengths: [100, 50], period_lr_multipliers: [1.0], warmup: 1, "
      "decay: 1}",
      "1 multipliers for 2 periods");
}

TEST(ScheduleConfig, CompositeErrorsNameTheItem) {
  expect_config_error(
      "{name: sequential, schedulers_max: [10, 20, 30],"
      " schedulers: [{name: constant}, {name: constant}]}",
      "3 values for 2 schedulers");
  expect_config_error(
      "{name: sequential, schedulers_max: [10],"
      " schedulers: [{name: constant}, {name: cos_with_warmup}]}",
      "scheduler.schedulers[1]");
  expect_config_error("{name: composable, stages: [{duration: 10, end_lr: 0.1}, {duration: 5}]}",
                      "scheduler.stages[1]': one of 'end_lr' or 'end_lr_fraction' is required");
  expect_config_error(
      "{name: composable, stages: [{duration: 10, end_lr: 0.1, start_lr: 0, "
      "start_lr_fraction: 0.5}]}",
      "give 'start_lr' or 'start_lr_fraction', not both");
  expect_config_error("{name: composable, stages: [{duration: 0, end_lr: 0.1}]}",
                      "scheduler.stages[0].duration' must be > 0");
  expect_config_error(
      "{name: composable, stages: [{duration: 3, end_lr: 0.1, shape: exponential}]}",
      "expected 'linear' or 'cosine'");
  expect_config_error(
      "{name: composable, stages: [{duration: 3, end_lr: 0.1}],"
      " override_decay: {start: 1, duration: 2}}",
      "scheduler.override_decay': one of 'end_lr' or 'end_lr_fraction' is required");
  expect_config_error("{name: power_lr, warmup: 5, b: 0.5}", "must be negative");
  expect_config_error("{name: exponential, lr_min: 0}", "scheduler.lr_min' must be > 0");
  expect_config_error("{name: power_lr, warmup: 5, decay: 3, decay_fraction: 0.1}", "not both");
}

TEST(ScheduleConfig, WarmupMinLrAbovePeakIsAnError) {
  auto s = from_yaml("{name: cos_with_warmup, warmup: 10, warmup_min_lr: 0.5}");
  EXPECT_THROW(s->lr(0.1, 1, 100), core::Error);
}

}  // namespace
}  // namespace tandem::optim
