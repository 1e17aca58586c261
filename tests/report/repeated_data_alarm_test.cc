// The repeated-data alarm's statistics on synthetic curves with known noise: the noise estimate,
// the lag-free local fit, the Bonferroni quantile, and the false-alarm rate of clean noisy runs
// (as noisy as the default job's early steps) next to the detection of a repeated-data run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "tandem/report/repeated_data_alarm.h"

namespace tandem::report {
namespace {

// Deterministic standard normals (splitmix64 + Box-Muller), the same on every platform.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : state_(seed) {}
  double operator()() {
    const double u1 = (static_cast<double>(next() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = (static_cast<double>(next() >> 11) + 0.5) / 9007199254740992.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

// A short run: loss falling from 11.5 toward 7 (the default job's first steps), training-loss
// noise sigma per step, held-out every 5 steps on the same curve plus an offset. `repeat`
// lowers the training loss by that much per step after step 5 without the held-out following.
Curves short_run(std::uint64_t seed, double sigma, double repeat = 0.0, int steps = 30) {
  Normal noise(seed);
  Curves c;
  for (int s = 1; s <= steps; ++s) {
    const double tokens = 4096.0 * s;
    const double clean = 7.0 + 4.5 * std::exp(-s / 12.0);
    c.metrics["train/loss"].push_back(
        {tokens, clean - repeat * std::max(0, s - 5) + sigma * noise()});
    if (s % 5 == 0) c.metrics["eval/val/loss"].push_back({tokens, clean + 0.05});
  }
  return c;
}

TEST(AlarmStatistics, NoiseEstimateOnAFallingCurve) {
  for (double sigma : {0.01, 0.05, 0.1}) {
    Curves c = short_run(11, sigma, 0.0, 400);
    EXPECT_NEAR(curve_noise(c.metrics.at("train/loss")), sigma, 0.15 * sigma) << sigma;
  }
  EXPECT_TRUE(std::isnan(curve_noise({{1, 1}, {2, 1}, {3, 1}})));
}

TEST(AlarmStatistics, LocalFitHasNoLagOnASlope) {
  std::vector<Point> line;
  for (int i = 0; i < 30; ++i) line.push_back({100.0 * i, 10.0 - 0.2 * i});
  for (double t : {0.0, 1000.0, 1450.0, 2900.0}) {
    auto f = local_linear_fit(line, t, 9);
    ASSERT_TRUE(f.has_value());
    EXPECT_NEAR(f->value, 10.0 - 0.002 * t, 1e-9) << t;
  }
  // At the end of the curve the fit is one-sided: a larger standard error than in the middle.
  EXPECT_GT(local_linear_fit(line, 2900.0, 9)->se_factor,
            local_linear_fit(line, 1500.0, 9)->se_factor);
  EXPECT_FALSE(local_linear_fit(line, 3000.0, 9).has_value());
}

TEST(AlarmStatistics, BonferroniQuantile) {
  EXPECT_NEAR(normal_quantile_upper(0.025), 1.959964, 1e-5);
  EXPECT_NEAR(normal_quantile_upper(0.01 / 8), 3.023341, 1e-5);
  EXPECT_GT(normal_quantile_upper(0.01 / 100), normal_quantile_upper(0.01 / 8));
}

TEST(AlarmStatistics, CleanNoisyRunsRarelyAlarmRepeatedRunsAlways) {
  AlarmOptions options;
  int clean_alarms = 0, self_alarms = 0, detected = 0, detected_self = 0;
  const int trials = 100;
  for (int i = 0; i < trials; ++i) {
    Curves run = short_run(1000 + i, 0.1), reference = short_run(5000 + i, 0.1);
    clean_alarms += check_repeated_data(run, &reference, options).triggered;
    self_alarms += check_repeated_data(run, nullptr, options).triggered;
    Curves repeated = short_run(9000 + i, 0.1, 0.03);  // 0.75 below by step 30
    detected += check_repeated_data(repeated, &reference, options).triggered;
    detected_self += check_repeated_data(repeated, nullptr, options).triggered;
  }
  // alpha = 0.01 over all points of a comparison: about one false alarm in a hundred runs.
  EXPECT_LE(clean_alarms, 3);
  EXPECT_LE(self_alarms, 3);
  EXPECT_EQ(detected, trials);
  EXPECT_EQ(detected_self, trials);
}

TEST(AlarmStatistics, MoreEvaluationsDoNotMeanMoreFalseAlarms) {
  // The same clean run evaluated every step instead of every 5: the quantile grows with the
  // number of points, so the false-alarm rate stays bounded.
  AlarmOptions options;
  int alarms = 0;
  for (int i = 0; i < 100; ++i) {
    Curves run = short_run(2000 + i, 0.1), reference = short_run(7000 + i, 0.1);
    for (Curves* c : {&run, &reference}) {
      auto& h = c->metrics["eval/val/loss"];
      h.clear();
      for (const auto& p : c->metrics["train/loss"]) {
        h.push_back({p.tokens, 7.05 + 4.5 * std::exp(-p.tokens / 4096.0 / 12.0)});
      }
    }
    auto r = check_repeated_data(run, &reference, options);
    EXPECT_EQ(r.tests, 30);
    alarms += r.triggered;
  }
  EXPECT_LE(alarms, 3);
}

}  // namespace
}  // namespace tandem::report
