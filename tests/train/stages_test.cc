// Stage start (trainer.load_path, AI2's mid-training): a stage-2 run starts from a stage-1
// checkpoint's weights (and, by default, its Adam moments) with fresh trainer state and its own
// data seed and schedule.
#include <gtest/gtest.h>

#include "../support/test_support.h"

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;

std::string parity_args(const std::string& run, int steps) {
  return fixture("train/parity.yaml") + " trainer.save_folder=" + run +
         " trainer.max_steps=" + std::to_string(steps) + " evaluation.interval=0";
}

TEST(Stages, StageTwoStartsFromStageOneWeightsAndMoments) {
  const std::string one = testing::temp_dir("stage_one");
  auto r =
      run_tandem("train " + parity_args(one, 8) + " trainer.init_from=" + fixture("train/init_hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Stage 2: another data order and a linear decay from the full learning rate.
  const std::string stage2 = " data.seed=7 scheduler.name=linear_with_warmup scheduler.warmup=0";
  auto run_stage2 = [&](const std::string& name, bool moments) {
    const std::string dir = testing::temp_dir(name);
    auto s = run_tandem("train " + parity_args(dir, 3) + stage2 + " trainer.load_path=" + one +
                        " trainer.load_optimizer_state=" + (moments ? "true" : "false"));
    EXPECT_EQ(s.exit_code, 0) << s.output;
    EXPECT_NE(s.output.find("stage start from"), std::string::npos) << s.output;
    EXPECT_NE(s.output.find("step-000008"), std::string::npos) << s.output;
    return testing::read_metrics(dir + "/metrics.jsonl");
  };
  const auto with_moments = run_stage2("stage_two_moments", true);
  const auto weights_only = run_stage2("stage_two_weights", false);
  // The untrained model on stage 2's first batch.
  const std::string fresh = testing::temp_dir("stage_two_fresh");
  r = run_tandem("train " + parity_args(fresh, 1) + stage2 +
                 " trainer.init_from=" + fixture("train/init_hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto untrained = testing::read_metrics(fresh + "/metrics.jsonl");

  ASSERT_EQ(with_moments.size(), 3u);
  ASSERT_EQ(weights_only.size(), 3u);
  EXPECT_EQ(with_moments[0]["step"], 1);  // fresh trainer state
  EXPECT_EQ(with_moments[0]["tokens"], 512);
  // Same weights on the same batch: the same first loss, lower than the untrained model's.
  EXPECT_EQ(with_moments[0]["train/loss"], weights_only[0]["train/loss"]);
  EXPECT_LT(with_moments[0]["train/loss"].get<double>(),
            untrained[0]["train/loss"].get<double>() - 1e-3);
  // Stage 1's moments change the first update, hence the second loss.
  EXPECT_NE(with_moments[1]["train/loss"], weights_only[1]["train/loss"]);
}

}  // namespace
}  // namespace tandem
