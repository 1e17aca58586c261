// evaluation.on_startup (OLMo-core's eval_on_startup): before the first step of each process the
// configured evaluations run on the starting weights, in a record of their own marked "startup".
// On a resume they equal what the run measured at that step before it stopped (same weights, same
// backend), and the training after them is the same as without them.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;

std::string args(const std::string& run, int steps) {
  return fixture("train/parity.yaml") + " trainer.init_from=" + fixture("train/init_hf") +
         " trainer.save_folder=" + run + " trainer.max_steps=" + std::to_string(steps) +
         " trainer.save_interval=3 trainer.progress=false evaluation.interval=3";
}

TEST(EvalOnStartup, AResumeEvaluatesTheCheckpointAsTheRunDidAtThatStep) {
  const std::string straight = testing::temp_dir("startup_straight");
  auto r = run_tandem("train " + args(straight, 9));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = testing::temp_dir("startup_resumed");
  r = run_tandem("train " + args(run, 6));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tandem("train " + args(run, 9) + " evaluation.on_startup=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evaluation on startup, at step 6"), std::string::npos) << r.output;

  const auto a = testing::read_metrics(straight + "/metrics.jsonl");
  const auto b = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 9u);
  ASSERT_EQ(b.size(), 10u) << "steps 1-6, the startup record, steps 7-9";
  const nlohmann::json& startup = b[6];
  EXPECT_EQ(startup["step"], 6);
  EXPECT_EQ(startup["tokens"], b[5]["tokens"]);
  EXPECT_EQ(startup["startup"], true);
  EXPECT_FALSE(startup.contains("train/loss"));
  // Step 6's evaluation ran on the weights the step-6 checkpoint holds: bit for bit the same.
  ASSERT_TRUE(b[5].contains("eval/heldout/loss")) << b[5].dump();
  EXPECT_EQ(startup["eval/heldout/loss"], b[5]["eval/heldout/loss"]);
  EXPECT_EQ(startup["eval/heldout/ppl"], b[5]["eval/heldout/ppl"]);
  // The evaluation leaves training as it was.
  for (std::size_t i = 0; i < 9; ++i) {
    const nlohmann::json& line = b[i < 6 ? i : i + 1];
    EXPECT_EQ(line["step"], a[i]["step"]);
    EXPECT_EQ(line["train/loss"], a[i]["train/loss"]) << "step " << i + 1;
    EXPECT_EQ(line["train/grad_norm"], a[i]["train/grad_norm"]) << "step " << i + 1;
  }
  EXPECT_EQ(b[9]["eval/heldout/loss"], a[8]["eval/heldout/loss"]);
  // The log with its marked record reads as a curve (strict, as a reference file).
  r = run_tandem("compare " + straight + " " + run + "/metrics.jsonl --out " + run + "/compare");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(EvalOnStartup, AFreshRunEvaluatesItsInitialWeightsAtStepZero) {
  const std::string run = testing::temp_dir("startup_fresh");
  auto r = run_tandem("train " + args(run, 2) + " evaluation.on_startup=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["step"], 0);
  EXPECT_EQ(m[0]["tokens"], 0);
  EXPECT_EQ(m[0]["startup"], true);
  // The initial weights' evaluation, then the end of the run's, two steps later.
  ASSERT_TRUE(m[0].contains("eval/heldout/loss")) << m[0].dump();
  ASSERT_TRUE(m[2].contains("eval/heldout/loss")) << m[2].dump();
  EXPECT_TRUE(std::isfinite(m[0]["eval/heldout/loss"].get<double>()));
  EXPECT_NE(m[0]["eval/heldout/loss"], m[2]["eval/heldout/loss"]);
  // Nothing is evaluated for a run that has no step left.
  r = run_tandem("train " + args(run, 2) + " evaluation.on_startup=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("evaluation on startup"), std::string::npos) << r.output;
  EXPECT_EQ(testing::read_metrics(run + "/metrics.jsonl").size(), 3u);
}

TEST(EvalOnStartup, NothingToEvaluateIsAConfigError) {
  try {
    train::load_run_config(fixture("train/parity.yaml"),
                           {"evaluation.on_startup=true", "evaluation.sets=[]"});
    FAIL() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "evaluation.on_startup': nothing to evaluate at startup (no sets, padded or "
                  "downstream)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem
