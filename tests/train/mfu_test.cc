// MFU means what it says: the model's FLOPs over the stated peak of every device in the job, so W
// ranks doing the same per-rank work report the same MFU as one rank, and a disturbed machine can
// slow a run down but never push its MFU past 100% (the peak is stated, not measured).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "../support/test_support.h"
#include "tandem/kernels/cpu/cpu_features.h"
#include "tandem/train/mfu.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

TEST(Mfu, WRanksDoingTheSameWorkEachReportTheSameMfu) {
  kernels::Backend& cpu = testing::cpu_backend();
  const double per_rank_tokens_per_s = 1234.5, flops_per_token = 6.0e6;
  const train::HardwarePeak one = train::hardware_peak(cpu, std::nullopt, 1);
  for (int world : {2, 4, 8}) {
    const train::HardwarePeak many = train::hardware_peak(cpu, std::nullopt, world);
    EXPECT_DOUBLE_EQ(many.total(), world * one.total());
    EXPECT_DOUBLE_EQ(train::mfu(world * per_rank_tokens_per_s, flops_per_token, many),
                     train::mfu(per_rank_tokens_per_s, flops_per_token, one))
        << world;
  }
}

TEST(Mfu, PeakIsStatedNotMeasured) {
  kernels::Backend& cpu = testing::cpu_backend();
  // The CPU's peak comes from what the CPU is (cores in use, clock, vector width), so it is the
  // same however busy the machine is.
  const auto& f = kernels::cpu::cpu_features();
  ASSERT_GT(f.clock_ghz, 0.0) << "no clock found in /proc/cpuinfo: set trainer.peak_tflops";
  const double a = cpu.peak_flops(kernels::DType::f32), b = cpu.peak_flops(kernels::DType::f32);
  EXPECT_EQ(a, b);
  EXPECT_GE(a, f.clock_ghz * 1e9 * kernels::cpu::fp32_flops_per_cycle_per_core());
  // trainer.peak_tflops overrides it, per device.
  const train::HardwarePeak stated = train::hardware_peak(cpu, 2.0, 3);
  EXPECT_DOUBLE_EQ(stated.total(), 6e12);
  EXPECT_EQ(stated.source, "trainer.peak_tflops");
}

// A real run: every step's logged MFU is tokens/s (global) x FLOPs per token over the stated peak
// of all ranks, and below 100%.
TEST(Mfu, LoggedMfuUsesTheStatedPeakOfEveryRank) {
  const std::string run = testing::temp_dir("mfu_run");
  const std::string config = testing::fixture("train/parity.yaml");
  auto r = testing::run_tandem("train " + config + " trainer.init_from=" +
                               testing::fixture("train/init_hf") + " trainer.save_folder=" + run +
                               " trainer.max_steps=3 trainer.progress=true evaluation.interval=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex(R"(MFU peak: ([0-9.]+) GFLOP/s per device x (\d+) \()")))
      << r.output;
  const double peak = std::stod(m[1]) * 1e9 * std::stod(m[2]);
  EXPECT_EQ(std::stoi(m[2]), 1);
  const train::RunConfig rc = train::load_run_config(config, {});
  const double fpt = rc.model.flops_per_token(rc.data.sequence_length);
  const double olmo_core_fpt =
      static_cast<double>(rc.model.olmo_core_flops_per_token(rc.data.sequence_length));
  for (const auto& rec : testing::read_metrics(run + "/metrics.jsonl")) {
    const double mfu = rec["mfu"].get<double>();
    // The log prints the peak to 0.1 GFLOP/s.
    EXPECT_NEAR(mfu, rec["tokens_per_s"].get<double>() * fpt / peak, 1e-3 * mfu);
    // Beside it, the same throughput in OLMo-core 3.0's FLOP count.
    EXPECT_NEAR(rec["mfu_olmo_core"].get<double>(), mfu * olmo_core_fpt / fpt, 1e-12 * mfu);
    EXPECT_GT(mfu, 0.0);
    EXPECT_LT(mfu, 1.0);
  }
  // The progress line prints the same figure.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(MFU [0-9]+\.[0-9]%)"))) << r.output;
}

}  // namespace
}  // namespace tandem
