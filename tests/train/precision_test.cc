// `precision: fp32 | bf16` in the run config: the trainer logs its memory by precision (bf16 keeps
// a bf16 compute copy of the weights and bf16 activations, so its saved activations shrink), the
// bf16 run's first losses are close to the fp32 run's but not identical (it really ran in bf16),
// and an unknown precision is refused naming the value.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "../support/test_support.h"

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;

struct Logged {
  std::int64_t compute_weights = 0, activations = 0, parameters = 0;
  std::vector<nlohmann::json> metrics;
};

Logged train_in_precision(const char* precision) {
  const std::string run = testing::temp_dir(std::string("precision_") + precision);
  auto r = run_tandem("train " + fixture("train/parity.yaml") + " trainer.init_from=" +
                      fixture("train/init_hf") + " trainer.save_folder=" + run +
                      " trainer.max_steps=3 trainer.progress=false evaluation.interval=0 "
                      "precision=" +
                      precision);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  Logged out;
  std::smatch m;
  if (std::regex_search(r.output, m, std::regex(R"(compute weights (\d+) B)")))
    out.compute_weights = std::stoll(m[1]);
  EXPECT_TRUE(std::regex_search(r.output, m, std::regex(R"(saved activations (\d+) B)")))
      << r.output;
  out.activations = std::stoll(m[1]);
  EXPECT_TRUE(std::regex_search(r.output, m,
                                std::regex(R"(parameters (\d+) B \([^)]*\) \(fp32 masters\))")))
      << r.output;
  out.parameters = std::stoll(m[1]);
  out.metrics = testing::read_metrics(run + "/metrics.jsonl");
  return out;
}

TEST(Precision, Bf16SavesActivationMemoryAndStaysCloseToFp32) {
  Logged f = train_in_precision("fp32"), b = train_in_precision("bf16");
  EXPECT_EQ(f.compute_weights, 0);
  // A bf16 copy of the fp32 masters but the embedding table (read from the masters).
  EXPECT_GT(b.compute_weights, 0);
  EXPECT_LT(b.compute_weights * 2, b.parameters);
  EXPECT_EQ(b.parameters, f.parameters);
  EXPECT_LT(b.activations, f.activations * 6 / 10);
  ASSERT_EQ(f.metrics.size(), 3u);
  ASSERT_EQ(b.metrics.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const double lf = f.metrics[i]["train/loss"], lb = b.metrics[i]["train/loss"];
    EXPECT_NE(lf, lb) << "step " << i + 1 << ": the bf16 run computed in fp32";
    EXPECT_LT(std::abs(lb - lf), 0.01 * lf) << "step " << i + 1;
  }
}

TEST(Precision, UnknownPrecisionIsNamed) {
  auto r = run_tandem("train " + fixture("train/parity.yaml") + " trainer.save_folder=" +
                      testing::temp_dir("precision_bad") + " precision=fp16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("precision must be fp32 or bf16, got 'fp16'"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace tandem
