// trainer.profile_step in `tandem train`: the chosen step's backend ops are timed into
// <save_folder>/profile/step-NNNNNN.rank-0.json and summarised in the log, and the ops' FLOPs are
// exactly the MFU's count for the step's tokens (the curve-parity run: GQA, sliding windows, two
// micro-batches per step); the other steps are not profiled, and the training is unchanged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../support/test_support.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

using testing::fixture;

TEST(StepProfile, TheChosenStepsOpsAreTimedAndCountTheMfusFlops) {
  const std::string plain_dir = testing::temp_dir("profile_off");
  const std::string dir = testing::temp_dir("profile_step2");
  const std::string args = "train " + fixture("train/parity.yaml") +
                           " trainer.max_steps=3 evaluation.interval=0 trainer.peak_tflops=0.1";
  auto plain = testing::run_tandem(args + " trainer.save_folder=" + plain_dir);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto r = testing::run_tandem(args + " trainer.save_folder=" + dir + " trainer.profile_step=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("op profile of step 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("longest: "), std::string::npos) << r.output;

  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir + "/profile"))
    files.push_back(e.path().filename().string());
  ASSERT_EQ(files, std::vector<std::string>({"step-000002.rank-0.json"}));
  const nlohmann::json p =
      nlohmann::json::parse(std::ifstream(dir + "/profile/step-000002.rank-0.json"));
  EXPECT_EQ(p["step"], 2);
  const auto metrics = testing::read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 3u);
  const std::int64_t tokens =
      metrics[1]["tokens"].get<std::int64_t>() - metrics[0]["tokens"].get<std::int64_t>();
  EXPECT_EQ(p["tokens"].get<std::int64_t>(), tokens);
  const train::RunConfig config = train::load_run_config(fixture("train/parity.yaml"), {});
  const double mfu_flops =
      config.model.flops_per_token(config.data.sequence_length) * static_cast<double>(tokens);
  EXPECT_DOUBLE_EQ(p["mfu_flops"].get<double>(), mfu_flops);
  double flops = 0.0, ms = 0.0;
  std::set<std::string> ops;
  for (const auto& o : p["ops"]) {
    ops.insert(o["op"].get<std::string>());
    flops += o.value("tflop", 0.0) * 1e12;
    ms += o["ms"].get<double>();
    EXPECT_GE(o["ms"].get<double>(), 0.0);
  }
  EXPECT_NEAR(flops, mfu_flops, 1e-9 * mfu_flops);
  EXPECT_DOUBLE_EQ(p["flops"].get<double>(), mfu_flops);
  EXPECT_NEAR(ms, p["ops_ms"].get<double>(), 1e-9 * ms);
  EXPECT_LE(p["ops_ms"].get<double>(), p["span_ms"].get<double>());
  for (const char* op : {"embedding_forward", "attention_backward", "lm_head_cross_entropy",
                         "sums_of_squares", "adamw_updates"})
    EXPECT_TRUE(ops.count(op)) << op;
  // Profiling times the ops and changes nothing they compute.
  const auto plain_metrics = testing::read_metrics(plain_dir + "/metrics.jsonl");
  ASSERT_EQ(plain_metrics.size(), metrics.size());
  for (std::size_t i = 0; i < metrics.size(); ++i)
    EXPECT_EQ(metrics[i]["train/loss"].get<double>(), plain_metrics[i]["train/loss"].get<double>());
}

TEST(StepProfile, ANegativeStepIsRefusedByName) {
  auto r = testing::run_tandem("train " + fixture("train/parity.yaml") + " trainer.save_folder=" +
                               testing::temp_dir("profile_bad") + " trainer.profile_step=-1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("trainer.profile_step"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
