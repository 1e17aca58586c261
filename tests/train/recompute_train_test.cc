// trainer.recompute in `tandem train`: three steps of the curve-parity run (GQA, sliding windows,
// four micro-batches per step) with full and with selective recompute log the same losses and
// gradient norms as keeping every activation, end with byte-identical weights, and report less
// activation memory in the run log.
#include <gtest/gtest.h>

#include <regex>

#include "../support/test_support.h"

namespace tandem {
namespace {

using testing::fixture;

struct TrainedRun {
  std::vector<nlohmann::json> metrics;
  std::string weights;            // the final checkpoint's model.safetensors
  std::int64_t activation_bytes;  // "saved activations N B" from the log
};

TrainedRun train_with_policy(const std::string& policy) {
  const std::string dir = testing::temp_dir("recompute_" + policy);
  auto r =
      testing::run_tandem("train " + fixture("train/parity.yaml") + " trainer.save_folder=" + dir +
                          " trainer.max_steps=3 evaluation.interval=0 "
                          "trainer.peak_tflops=0.1 trainer.recompute=" +
                          policy);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  TrainedRun run;
  run.metrics = testing::read_metrics(dir + "/metrics.jsonl");
  run.weights = testing::read_text(dir + "/checkpoints/step-000003/model/model.safetensors");
  std::smatch m;
  const std::regex saved("saved activations (\\d+) B .*recompute " + policy + "\\)");
  EXPECT_TRUE(std::regex_search(r.output, m, saved)) << r.output;
  run.activation_bytes = m.empty() ? -1 : std::stoll(m[1]);
  return run;
}

TEST(RecomputeTraining, SameLossesAndWeightsWithLessActivationMemory) {
  const TrainedRun none = train_with_policy("none");
  ASSERT_EQ(none.metrics.size(), 3u);
  EXPECT_FALSE(none.weights.empty());
  for (const std::string policy : {"full", "selective"}) {
    SCOPED_TRACE(policy);
    const TrainedRun r = train_with_policy(policy);
    ASSERT_EQ(r.metrics.size(), none.metrics.size());
    for (std::size_t i = 0; i < r.metrics.size(); ++i) {
      EXPECT_EQ(r.metrics[i]["train/loss"].get<double>(),
                none.metrics[i]["train/loss"].get<double>());
      EXPECT_EQ(r.metrics[i]["train/grad_norm"].get<double>(),
                none.metrics[i]["train/grad_norm"].get<double>());
    }
    EXPECT_TRUE(r.weights == none.weights) << "final weights differ";
    EXPECT_GT(r.activation_bytes, 0);
    EXPECT_LT(r.activation_bytes, none.activation_bytes);
  }
}

TEST(RecomputeTraining, AnUnknownPolicyIsAnErrorNamingTheKey) {
  const std::string dir = testing::temp_dir("recompute_bad");
  auto r =
      testing::run_tandem("train " + fixture("train/parity.yaml") + " trainer.save_folder=" + dir +
                          " trainer.max_steps=1 trainer.recompute=some");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("trainer.recompute"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'some'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
