// Run-config values of the wrong type are named by key (yaml-cpp's "bad conversion" named
// neither the key nor the file).
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;
using namespace train;
namespace fs = std::filesystem;

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    load_run_config(testing::fixture("train/parity.yaml"), overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(RunConfigErrors, BetasOfTheWrongTypeNameTheKey) {
  const std::string e = config_error({"optim.betas=[a, b]"});
  EXPECT_NE(e.find("key 'optim.betas[0]'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a number, got 'a'"), std::string::npos) << e;
}

TEST(RunConfigErrors, NestedValueWhereAnIntegerBelongsNamesTheKey) {
  const std::string e = config_error({"trainer.max_steps={a: 1}"});
  EXPECT_NE(e.find("trainer.max_steps"), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;
}

// OLMo-core's max_duration (steps or tokens) instead of max_steps, and its hard_stop: the run
// trains to the step where the first is due (tokens seen >= value: ceil(value / batch) steps);
// the schedule's horizon is max_duration's, a token duration's as it is (t_max in tokens).
TEST(RunConfig, MaxDurationAndHardStopAsOlmoCoreCountsThem) {
  const std::string cfg = testing::fixture("train/parity.yaml");  // global batch: 512 tokens
  RunConfig c = load_run_config(cfg, {});
  EXPECT_EQ(c.trainer.max_steps, 100);
  EXPECT_EQ(c.trainer.horizon.max_steps, 100);
  EXPECT_EQ(c.trainer.horizon.max_tokens, 100 * 512);
  EXPECT_EQ(c.trainer.horizon.global_batch_tokens, 512);
  c = load_run_config(
      cfg, {"trainer.max_steps=null", "trainer.max_duration={value: 20000, unit: tokens}"});
  EXPECT_EQ(c.trainer.max_steps, 40);  // 39 batches hold 19,968 tokens
  EXPECT_EQ(c.trainer.horizon.max_steps, 40);
  EXPECT_EQ(c.trainer.horizon.max_tokens, 20000);
  c = load_run_config(
      cfg, {"trainer.max_steps=null", "trainer.max_duration={value: 1.0e+5, unit: tokens}",
            "trainer.hard_stop={value: 30, unit: steps}"});
  EXPECT_EQ(c.trainer.max_steps, 30);
  EXPECT_EQ(c.trainer.horizon.max_steps, 196);
  EXPECT_EQ(c.trainer.horizon.max_tokens, 100000);
  c = load_run_config(cfg, {"trainer.hard_stop={value: 10241, unit: tokens}"});
  EXPECT_EQ(c.trainer.max_steps, 21);
  EXPECT_EQ(c.trainer.horizon.max_steps, 100);
  c = load_run_config(cfg, {"trainer.hard_stop={value: 500, unit: steps}"});  // after the end
  EXPECT_EQ(c.trainer.max_steps, 100);
  // Epochs: resolved once the data's batches per epoch are known (the trainer's loader).
  c = load_run_config(cfg,
                      {"trainer.max_steps=null", "trainer.max_duration={value: 2, unit: epochs}",
                       "trainer.hard_stop={value: 50000, unit: tokens}"});
  EXPECT_TRUE(c.trainer.needs_batches_per_epoch());
  EXPECT_EQ(c.trainer.max_steps, 0);
  c.trainer.resolve_durations(512, 79);
  EXPECT_EQ(c.trainer.horizon.max_steps, 158);
  EXPECT_EQ(c.trainer.horizon.max_tokens, 158 * 512);
  EXPECT_EQ(c.trainer.max_steps, 98);  // the hard stop: 98 batches reach 50,000 tokens
  EXPECT_FALSE(load_run_config(cfg, {}).trainer.needs_batches_per_epoch());

  auto error_with = [&](const std::vector<std::string>& overrides, const std::string& fragment) {
    const std::string e = config_error(overrides);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  error_with({"trainer.max_duration={value: 10, unit: steps}"}, "give max_steps or max_duration");
  error_with({"trainer.max_steps=null"}, "give max_steps or max_duration");
  error_with({"trainer.max_steps=null", "trainer.max_duration={value: 2, unit: days}"},
             "trainer.max_duration.unit': unit 'days' (expected steps, tokens or epochs)");
  error_with({"trainer.max_steps=null", "trainer.max_duration={value: 2.5, unit: steps}"},
             "trainer.max_duration.value' must be a whole number");
  error_with({"trainer.max_steps=null", "trainer.max_duration={value: 0, unit: tokens}"},
             "must be a whole number >= 1");
  error_with({"trainer.max_steps=null", "trainer.max_duration={value: 10}"},
             "trainer.max_duration.unit");
  error_with({"trainer.hard_stop={value: 10, unit: steps, when: now}"}, "when");
  error_with({"trainer.max_steps=20000000000000000"}, "are beyond counting");
}

// OLMo-core's in-loop downstream evaluator cuts queries to the train module's
// max_sequence_length, the training sequence length in AI2's scripts: a run's max_length defaults
// to data.sequence_length (64 here), not the model's 128.
TEST(RunConfig, DownstreamQueriesDefaultToTheTrainingSequenceLength) {
  const std::string cfg = testing::fixture("train/parity.yaml");
  RunConfig c = load_run_config(cfg, {"evaluation.downstream={tasks: [arc_easy:rc]}"});
  ASSERT_TRUE(c.eval.downstream);
  EXPECT_EQ(c.model.max_sequence_length, 128);
  EXPECT_EQ(c.eval.downstream->options.max_length, 64);
  c = load_run_config(cfg, {"evaluation.downstream={tasks: [arc_easy:rc], max_length: 100}"});
  EXPECT_EQ(c.eval.downstream->options.max_length, 100);
}

// Downstream data paths are relative to the config's folder, as the training files are.
TEST(RunConfig, DownstreamPathsAreRelativeToTheConfig) {
  const std::string cfg = testing::fixture("train/parity.yaml");
  const std::string dir = fs::path(cfg).parent_path().string();
  const RunConfig c = load_run_config(
      cfg, {"evaluation.downstream={tasks: [arc_easy:rc], tokenizer: ../eval/tokenizer.json, "
            "tasks_dir: tasks, hf_datasets_dir: /abs/hf}"});
  ASSERT_TRUE(c.eval.downstream);
  EXPECT_EQ(c.eval.downstream->tokenizer,
            (fs::path(dir) / "../eval/tokenizer.json").lexically_normal().string());
  EXPECT_EQ(c.eval.downstream->options.tasks_dir, (fs::path(dir) / "tasks").string());
  EXPECT_EQ(c.eval.downstream->options.hf_datasets_dir, "/abs/hf");
}

TEST(RunConfigErrors, FreshStartIsAKnownKey) {
  EXPECT_EQ(config_error({"trainer.fresh_start=true"}), "no error");
}

}  // namespace
}  // namespace tandem
