// bench_gpu_train_step --layers fit, the 7B-shaped layer stack of bench/gpu_check.sh: from two
// probe steps (2 and 3 layers) it predicts the step's peak for any layer count and takes the most
// of the config's layers whose prediction stays within 93 % of the room tandem has on the device;
// the timed steps then run in that room at the predicted peak. On the CUDA emulator, where the
// room is set (TANDEM_CUDA_EMULATOR_HELD_BYTES): with the whole device every layer of the tiny
// config is taken; with room for three and a half of them by the probes' line, three are.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "cuda_test_util.h"

namespace tandem {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct FitRun {
  testing::CommandResult result;
  nlohmann::json json;
};

#ifdef TANDEM_BENCH_GPU_TRAIN_STEP
FitRun fit_run(std::int64_t held_bytes, const std::string& name) {
  const std::string json = testing::temp_dir("bench_fit_" + name) + "/fit.json";
  FitRun r;
  r.result = testing::run_shell(
      "TANDEM_CUDA_EMULATOR_HELD_BYTES=" + std::to_string(held_bytes) + " " +
      TANDEM_BENCH_GPU_TRAIN_STEP + " --config " + TANDEM_SOURCE_DIR +
      "/configs/models/olmo3-tiny.yaml --precision bf16 --batch 1 --seq 256 --steps 1 --warmup 1 "
      "--layers fit --json " +
      json);
  if (r.result.exit_code == 0) r.json = testing::read_json(json);
  return r;
}

TEST(CudaBench, LayersFitTakesTheMostLayersTheRoomHolds) {
  REQUIRE_CUDA(gpu);
  if (gpu.describe().find("CUDA emulator") == std::string::npos)
    GTEST_SKIP() << "the device's free memory is set only on the CUDA emulator (on a GPU the "
                    "device check's 7B stack runs it)";
  const FitRun whole = fit_run(0, "whole");
  ASSERT_EQ(whole.result.exit_code, 0) << whole.result.output;
  const nlohmann::json& f = whole.json["layers_fit"];
  EXPECT_EQ(f["config_layers"].get<int>(), 5);
  EXPECT_EQ(f["layers"].get<int>(), 5);
  EXPECT_FALSE(f.contains("failed_with"));
  const double per_layer = f["per_layer_gib"].get<double>() * kGiB;
  const double fixed = f["fixed_gib"].get<double>() * kGiB;
  ASSERT_GT(per_layer, 0.0);
  ASSERT_GT(fixed, 0.0);
  // The probes' line is the measured peak: the timed step with all five layers.
  const double measured_whole = whole.json["peak_memory_in_use_gib"].get<double>() * kGiB;
  EXPECT_NEAR(measured_whole, fixed + 5 * per_layer, 1.0) << whole.result.output;

  const auto room = static_cast<std::int64_t>((fixed + 3.5 * per_layer) / 0.93);
  const std::int64_t device = gpu.memory_stats().device_total;
  const FitRun tight = fit_run(device - room, "tight");
  ASSERT_EQ(tight.result.exit_code, 0) << tight.result.output;
  const nlohmann::json& t = tight.json["layers_fit"];
  EXPECT_EQ(t["layers"].get<int>(), 3) << tight.result.output;
  EXPECT_EQ(tight.json["n_layers"].get<int>(), 3);
  EXPECT_FALSE(t.contains("failed_with")) << tight.result.output;
  EXPECT_NEAR(t["available_gib"].get<double>() * kGiB, static_cast<double>(room), 1.0);
  // The same line from the probes in less room, and the step at its prediction.
  EXPECT_NEAR(t["per_layer_gib"].get<double>() * kGiB, per_layer, 1.0);
  const double measured = tight.json["peak_memory_in_use_gib"].get<double>() * kGiB;
  EXPECT_NEAR(measured, fixed + 3 * per_layer, 1.0) << tight.result.output;
  EXPECT_LE(measured, 0.93 * static_cast<double>(room));

  // Room for the probes (three layers) but not, within 93 %, for one layer beside the fixed part
  // (the tiny config's 100k-row embedding and logits dwarf a layer): an error that says so.
  const auto probes_only = static_cast<std::int64_t>(fixed + 3.05 * per_layer);
  ASSERT_LT(0.93 * static_cast<double>(probes_only), fixed + per_layer);
  const FitRun none = fit_run(device - probes_only, "none");
  EXPECT_NE(none.result.exit_code, 0);
  EXPECT_NE(none.result.output.find("not one layer fits"), std::string::npos) << none.result.output;
}
#else
TEST(CudaBench, LayersFitTakesTheMostLayersTheRoomHolds) {
  GTEST_SKIP() << "built without the benchmarks (TANDEM_BUILD_BENCH=OFF)";
}
#endif

}  // namespace
}  // namespace tandem
