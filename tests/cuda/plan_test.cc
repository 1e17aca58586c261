// `tandem plan --device h200` against the CUDA backend's own measure: the planned backend memory
// (the model's buffers as the CPU plan counts them, plus the CUDA kernels' scratch: cuBLASLt's
// workspace and the largest of the fused loss's logits chunk, the attention backward's
// workspace and the embedding backward's sort, kernels/cuda/scratch_sizes.h) is the caching
// allocator's peak in the first training step, up to the allocator's rounding. Three shapes: fp32
// and bf16 where the logits chunk is the largest scratch, and bf16 with 8 heads of 128 tokens where
// cuDNN's deterministic attention backward workspace is. The planner sizes that workspace by cuDNN
// 9's formula for Hopper, which the CUDA emulator reproduces; on a GPU the workspace is the
// installed cuDNN's own, so there the cuDNN cases record planned and measured (RecordProperty) and
// only the fp32 case is held to the bound. The trainer's start-up check (train/memory_preflight.h)
// counts the same and, on the emulator, warns a run without room before it starts, with what would
// fit, and plans cuDNN's attention backward in the pieces the backend runs it in where its whole
// workspace has no room.
#include <gtest/gtest.h>

#include <regex>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/kernels/cuda/scratch_sizes.h"

namespace tandem {
namespace {

using testing::fixture;

// About 100 blocks are live at the peak in these runs (counted on the emulator: 100 and 101),
// each rounded up by less than 512 B (CachingAllocator::round_size below 1 MiB; the shapes keep
// every block under 1 MiB but cuBLASLt's 32 MiB workspace, a multiple of the 2 MiB grain above).
// Leaving out one scratch item is off by far more: the logits chunk by 260 KiB or more, the
// attention workspace (in place of the smaller chunk) by 316 KiB, cuBLASLt's workspace by 32 MiB.
constexpr double kRoundingSlack = 128 * 512;

// The first number the pattern's group captures in a run's log (-1, and a failure, if none).
std::int64_t logged(const std::string& output, const std::string& pattern) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex(pattern))) << pattern << "\n" << output;
  return m.empty() ? -1 : std::stoll(m[1]);
}

std::int64_t measured_first_step_peak(const std::string& output) {
  return logged(output, R"(device memory per rank in the first step: peak (\d+) B)");
}

// The trainer's start-up check: `tandem plan`'s count for the run on this device.
std::int64_t preflight_planned(const std::string& output) {
  return logged(output, R"(memory plan \(as `tandem plan`\): (\d+) B)");
}

double planned_backend_memory(const std::string& overrides) {
  auto p = testing::run_tandem("plan " + fixture("train/parity.yaml") + " " + overrides +
                               " --device h200 --json");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  return nlohmann::json::parse(p.output.substr(p.output.find('{')))["memory_backend"].get<double>();
}

TEST(CudaPlan, PlannedBackendMemoryIsTheFirstStepsDevicePeak) {
  REQUIRE_CUDA(gpu);
  const bool emulated = gpu.describe().find("CUDA emulator") != std::string::npos;
  struct Case {
    std::string precision, overrides;
    bool cudnn;  // bf16 attention runs on cuDNN
  };
  const Case cases[] = {{"fp32", "", false},
                        {"bf16", "", true},
                        {"bf16",
                         "model.d_model=64 model.n_heads=8 data.sequence_length=128 "
                         "data.micro_batch_size=2",
                         true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.precision + " " + c.overrides);
    auto p = testing::run_tandem("plan " + fixture("train/parity.yaml") + " " + c.overrides +
                                 " --device h200 --json --precision " + c.precision);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const nlohmann::json plan = nlohmann::json::parse(p.output.substr(p.output.find('{')));
    const std::string dir = testing::temp_dir("cuda_plan_" + c.precision);
    auto r = testing::run_tandem("train " + fixture("train/parity.yaml") + " " + c.overrides +
                                 " backend=cuda precision=" + c.precision +
                                 " trainer.save_folder=" + dir +
                                 " trainer.max_steps=1 trainer.progress=false "
                                 "evaluation.interval=0 evaluation.max_instances=8 "
                                 "trainer.peak_tflops=0.1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double planned = plan["memory_backend"].get<double>();
    const auto measured = static_cast<double>(measured_first_step_peak(r.output));
    // The start-up check counts what `tandem plan` does, and finds room for it.
    EXPECT_EQ(preflight_planned(r.output), std::llround(planned));
    EXPECT_EQ(r.output.find("WARNING"), std::string::npos) << r.output;
    // The whole run's peak, the held-out evaluation after the last step included (a batch of 8
    // instances, run in pieces of the training micro-batch), is the first step's.
    const auto run_peak = static_cast<double>(
        logged(r.output, R"(device memory: peak (\d+) B \([\d.]+ MiB\) in use)"));
    const std::string key = c.precision + (c.overrides.empty() ? "" : "_attention");
    ::testing::Test::RecordProperty("planned_" + key, std::to_string(planned));
    ::testing::Test::RecordProperty("measured_" + key, std::to_string(measured));
    if (c.cudnn && !emulated) continue;  // the installed cuDNN sizes its own workspace
    EXPECT_GE(measured, planned);
    EXPECT_LE(measured, planned + kRoundingSlack);
    EXPECT_EQ(run_peak, measured);
  }
}

// A run without room for its plan says so at start-up, before its first step, with the changes
// that would fit; the first of them then runs in the same room. Emulated only (the device's room
// is set by TANDEM_CUDA_EMULATOR_HELD_BYTES): room halfway between the plans with recompute none
// and full, so that the run as configured cannot fit and full recompute (at least) can. In bf16, as
// the recipes run: the emulator's plain fp32 attention kernels made the runs slower, for nothing
// the check depends on.
TEST(CudaPlan, ARunWithoutRoomSaysSoAtStartUpAndWhatWouldFit) {
  REQUIRE_CUDA(gpu);
  if (gpu.describe().find("CUDA emulator") == std::string::npos)
    GTEST_SKIP() << "the device's free memory is set only on the CUDA emulator";
  const double none = planned_backend_memory("--precision bf16 --recompute none");
  const double full = planned_backend_memory("--precision bf16 --recompute full");
  ASSERT_LT(full + 2 * kRoundingSlack, none);  // room for the rounding between them
  const auto room = static_cast<std::int64_t>((none + full) / 2);
  const std::int64_t held = gpu.memory_stats().device_total - room;
  auto train = [&](const std::string& overrides) {
    return testing::run_shell(
        "TANDEM_CUDA_EMULATOR_HELD_BYTES=" + std::to_string(held) + " " + testing::tandem_binary() +
        " train " + fixture("train/parity.yaml") +
        " backend=cuda precision=bf16 trainer.save_folder=" +
        testing::temp_dir("cuda_plan_preflight") +
        " trainer.max_steps=1 trainer.progress=false evaluation.max_instances=8 " + overrides);
  };
  auto as_configured = train("");
  EXPECT_EQ(preflight_planned(as_configured.output), std::llround(none));
  std::smatch first;
  const std::regex suggestion(
      R"(WARNING: this run needs .* These would fit \(fastest first\): `([^`]+)`)");
  ASSERT_TRUE(std::regex_search(as_configured.output, first, suggestion)) << as_configured.output;
  // Before the run starts (the step's out-of-memory comes after it).
  EXPECT_LT(static_cast<std::size_t>(first.position(0)), as_configured.output.find("training "));
  EXPECT_EQ(as_configured.exit_code, 1) << as_configured.output;
  EXPECT_NE(as_configured.output.find("cannot allocate"), std::string::npos)
      << as_configured.output;

  auto suggested = train(first[1].str());
  EXPECT_EQ(suggested.exit_code, 0) << first[1] << "\n" << suggested.output;
  EXPECT_EQ(suggested.output.find("WARNING"), std::string::npos) << suggested.output;
  EXPECT_LT(preflight_planned(suggested.output), room);
  // Full recompute (the smallest plan) fits too, and is what it says.
  auto recompute = train("trainer.recompute=full");
  EXPECT_EQ(recompute.exit_code, 0) << recompute.output;
  EXPECT_EQ(preflight_planned(recompute.output), std::llround(full));
}

// A bf16 run whose device has room for cuDNN's attention backward workspace in pieces but not at
// once: the start-up check plans the pieces (`tandem plan`'s figure with the largest piece that
// fits) and says so, the backward runs in them, and the run is the run with room, bit for bit (the
// first step's gradient norm, the second step's loss), its second step without a cudaMalloc or a
// release of the allocator's cache. Emulated only (the room is set by
// TANDEM_CUDA_EMULATOR_HELD_BYTES): 8 heads of 8 on 2 kv heads, 2 sequences of 128 per
// micro-batch, so that the workspace (576 KiB whole, 288 KiB for one sequence's two kv heads) is
// the largest scratch, the room half way between the two.
TEST(CudaPlan, ARunWithRoomForCudnnsWorkspaceOnlyInPiecesRunsThem) {
  REQUIRE_CUDA(gpu);
  if (gpu.describe().find("CUDA emulator") == std::string::npos)
    GTEST_SKIP() << "the device's free memory is set only on the CUDA emulator";
  const std::string shape =
      "model.d_model=64 model.n_heads=8 data.sequence_length=128 data.micro_batch_size=2";
  namespace kc = kernels::cuda;
  const std::int64_t whole_ws = kc::cudnn_attention_backward_workspace_bytes(2, 8, 128, 8);
  const std::int64_t piece_ws = kc::cudnn_attention_backward_workspace_bytes(1, 8, 128, 8);
  const double whole = planned_backend_memory(shape + " --precision bf16");
  const auto room = static_cast<std::int64_t>(whole) - (whole_ws - piece_ws) / 2;
  auto train = [&](const std::string& held, const std::string& name) {
    const std::string dir = testing::temp_dir("cuda_plan_pieces_" + name);
    auto r = testing::run_shell(
        held + testing::tandem_binary() + " train " + fixture("train/parity.yaml") + " " + shape +
        " backend=cuda precision=bf16 trainer.save_folder=" + dir +
        " trainer.max_steps=2 trainer.progress=false evaluation.interval=0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{r.output, testing::read_metrics(dir + "/metrics.jsonl")};
  };
  const auto [roomy_log, roomy] = train("", "roomy");
  EXPECT_EQ(preflight_planned(roomy_log), std::llround(whole));
  EXPECT_EQ(roomy_log.find("pieces"), std::string::npos) << roomy_log;
  const std::int64_t held = gpu.memory_stats().device_total - room;
  const auto [tight_log, tight] =
      train("TANDEM_CUDA_EMULATOR_HELD_BYTES=" + std::to_string(held) + " ", "tight");
  EXPECT_EQ(preflight_planned(tight_log), std::llround(whole) - (whole_ws - piece_ws));
  EXPECT_NE(tight_log.find("workspace at once: the backward runs in 2 pieces"), std::string::npos)
      << tight_log;
  EXPECT_NE(tight_log.find("ran in 2 pieces of 1 batch entries x 2 kv heads"), std::string::npos)
      << tight_log;
  EXPECT_EQ(tight_log.find("WARNING"), std::string::npos) << tight_log;
  // The second step takes every buffer, the pieces' workspace too, from the allocator's cache.
  for (const std::string* log : {&roomy_log, &tight_log})
    EXPECT_NE(log->find("device allocator in the training steps after the first: 0 cudaMalloc "
                        "call(s), 0 cache release(s)"),
              std::string::npos)
        << *log;
  ASSERT_EQ(roomy.size(), 2u);
  ASSERT_EQ(tight.size(), 2u);
  EXPECT_EQ(tight[0]["train/grad_norm"].get<double>(), roomy[0]["train/grad_norm"].get<double>());
  EXPECT_EQ(tight[1]["train/loss"].get<double>(), roomy[1]["train/loss"].get<double>());
}

// A run the device has no room for ends with the allocator's out-of-memory error and the pointer
// to `tandem plan`, exit status 1. Emulated only: there the device's room is set by
// TANDEM_CUDA_EMULATOR_HELD_BYTES (all but 16 MiB held, less than cuBLASLt's 32 MiB workspace).
TEST(CudaPlan, ARunWithoutRoomEndsWithTheOutOfMemoryAndThePlansPointer) {
  REQUIRE_CUDA(gpu);
  if (gpu.describe().find("CUDA emulator") == std::string::npos)
    GTEST_SKIP() << "the device's free memory is set only on the CUDA emulator";
  const std::string dir = testing::temp_dir("cuda_plan_no_room");
  const std::int64_t held = gpu.memory_stats().device_total - (std::int64_t{16} << 20);
  auto no_room = testing::run_shell(
      "TANDEM_CUDA_EMULATOR_HELD_BYTES=" + std::to_string(held) + " " + testing::tandem_binary() +
      " train " + fixture("train/parity.yaml") + " backend=cuda " + "trainer.save_folder=" + dir +
      " trainer.max_steps=1 " + "trainer.progress=false evaluation.interval=0");
  EXPECT_EQ(no_room.exit_code, 1) << no_room.output;
  EXPECT_NE(no_room.output.find("cannot allocate"), std::string::npos) << no_room.output;
  EXPECT_NE(no_room.output.find("`tandem plan CONFIG --device ...`"), std::string::npos)
      << no_room.output;
}

}  // namespace
}  // namespace tandem
