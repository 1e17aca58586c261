#include "tandem/optim/skip_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fixture.h"
#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

// OLMo-core's SkipStepAdamW fed a synthetic loss / grad-norm sequence with spikes before the rule
// is active (applied), loss and grad-norm spikes afterwards (some skipped, some not because an
// earlier spike is still in the window), and small bumps (applied).
TEST(SkipStepParity, SameDecisionsAsOlmoCoreSkipStepAdamW) {
  nlohmann::json f = testing::load_fixture("skip_step.json");
  SkipStepRule rule(
      {f["rolling_interval_length"].get<std::int64_t>(), f["sigma_factor"].get<double>()});
  const auto& losses = f["losses"];
  const auto& norms = f["grad_norms"];
  const auto& want = f["skipped"];
  ASSERT_EQ(losses.size(), want.size());
  std::int64_t applied = 0, skipped = 0;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    // The reference saw fp32 tensors; the fixture stores their exact values.
    bool skip = rule.observe(losses[i].get<double>(), norms[i].get<double>());
    EXPECT_EQ(skip, want[i].get<bool>()) << "step index " << i;
    applied += !skip;
    skipped += skip;
  }
  // With step_increment_bugfix the Adam step counter counts applied updates only.
  EXPECT_EQ(applied, static_cast<std::int64_t>(f["adam_step_count"].get<double>()));
  EXPECT_EQ(rule.skipped_steps(), skipped);
  EXPECT_GE(skipped, 3);
}

TEST(SkipStep, InactiveUntilHalfTheWindowIsFilled) {
  SkipStepRule rule({8, 6.0});  // active once 4 values (current included) are held
  EXPECT_FALSE(rule.observe(1.0, std::nullopt));
  EXPECT_FALSE(rule.observe(1.1, std::nullopt));
  EXPECT_FALSE(rule.observe(1000.0, std::nullopt));  // 3 values: not yet active
  EXPECT_FALSE(rule.observe(1.0, std::nullopt));     // active; the 1000 inflates the std
  EXPECT_EQ(rule.losses().size(), 4u);
}

TEST(SkipStep, UsesUnbiasedStdOfPreviousValuesOnly) {
  // Previous {1, 2, 3}: mean 2, unbiased std 1, so with sigma 1 the threshold is exactly 3.
  SkipStepRule rule({6, 1.0});
  rule.observe(1.0, std::nullopt);
  rule.observe(2.0, std::nullopt);
  rule.observe(3.0, std::nullopt);
  SkipStepRule at = rule, above = rule;
  EXPECT_FALSE(at.observe(3.0, std::nullopt));  // (x - mean) <= sigma * std: proceed
  EXPECT_TRUE(above.observe(3.0000001, std::nullopt));
}

TEST(SkipStep, GradNormSpikeAloneSkips) {
  SkipStepRule rule({128, 6.0});
  for (int i = 0; i < 100; ++i)
    EXPECT_FALSE(rule.observe(3.0 + 0.01 * (i % 5), 1.0 + 0.01 * (i % 3)));
  EXPECT_TRUE(rule.observe(3.0, 50.0));
  EXPECT_FALSE(rule.observe(3.0, 1.0));
  EXPECT_EQ(rule.skipped_steps(), 1);
}

TEST(SkipStep, WindowKeepsLengthPlusOneValues) {
  SkipStepRule rule({10, 6.0});
  for (int i = 0; i < 50; ++i) rule.observe(i, static_cast<double>(i));
  EXPECT_EQ(rule.losses().size(), 11u);
  EXPECT_EQ(rule.losses().front(), 39.0);
  EXPECT_EQ(rule.grad_norms().size(), 11u);
}

TEST(SkipStep, NonFiniteValuesAreSkippedAndNotRecorded) {
  SkipStepRule rule({128, 6.0});
  EXPECT_TRUE(rule.observe(std::nan(""), 1.0));  // even before activation
  EXPECT_TRUE(rule.observe(3.0, INFINITY));
  EXPECT_TRUE(rule.losses().empty());
  for (int i = 0; i < 80; ++i) rule.observe(3.0 + 0.01 * (i % 4), 1.0 + 0.01 * (i % 3));
  EXPECT_TRUE(rule.observe(INFINITY, 1.0));
  EXPECT_FALSE(rule.observe(3.01, 1.01));  // the window is not poisoned
  EXPECT_EQ(rule.skipped_steps(), 3);
}

TEST(SkipStep, JsonRoundTripContinuesIdentically) {
  SkipStepRule a({16, 3.0});
  for (int i = 0; i < 20; ++i) a.observe(2.0 + 0.1 * std::sin(i * 1.3), 0.5 + 0.01 * (i % 4));
  SkipStepRule b = SkipStepRule::from_json(nlohmann::json::parse(a.to_json().dump()));
  EXPECT_EQ(b.losses(), a.losses());
  EXPECT_EQ(b.grad_norms(), a.grad_norms());
  EXPECT_EQ(b.skipped_steps(), a.skipped_steps());
  for (int i = 20; i < 60; ++i) {
    double loss = 2.0 + 0.1 * std::sin(i * 1.3) + (i % 9 == 0 ? 1.0 : 0.0);
    EXPECT_EQ(a.observe(loss, 0.5), b.observe(loss, 0.5)) << i;
  }
  EXPECT_EQ(a.to_json(), b.to_json());
}

TEST(SkipStep, BadStateIsRefusedWithTheFieldNamed) {
  nlohmann::json good = SkipStepRule({8, 6.0}).to_json();
  auto expect_error = [](nlohmann::json state, const std::string& fragment) {
    try {
      SkipStepRule::from_json(state);
      ADD_FAILURE() << "accepted " << state.dump();
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  nlohmann::json s = good;
  s.erase("losses");
  expect_error(s, "missing field 'losses'");
  s = good;
  s["grad_norms"] = "abc";
  expect_error(s, "'grad_norms' must be a list");
  s = good;
  s["losses"] = std::vector<double>(10, 1.0);
  expect_error(s, "more than the window allows");
  s = good;
  s["rolling_interval_length"] = 1;
  expect_error(s, "rolling_interval_length must be >= 2");
  s = good;
  s["skipped_steps"] = -1;
  expect_error(s, "skipped_steps");
  expect_error(nlohmann::json::array(), "expected a JSON object");
}

}  // namespace
}  // namespace tandem::optim
