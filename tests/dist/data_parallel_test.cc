// Data-parallel `tandem train` under mpirun on the curve-parity fixture: W=1, 2, 4 give the same
// global batches and per-step losses within 1e-5 relative; a W=4 checkpoint (each rank its share
// of the weights and moments) resumes at W=1, W=2 and W=4 and continues like the uninterrupted
// W=4 run (bit for bit at W=4); a checkpoint written with 2 OpenMP threads
// resumes with 1; trainer.profile_step profiles each rank's share of the step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "dist_test_util.h"
#include "tandem/train/train_config.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using namespace dist_testing;

// fp32 training where only the order of the gradient sum differs (per-rank partial sums): the
// losses agree to ~1e-9 in practice; 1e-5 is the bound.

TEST(DataParallel, WorldSizes124GiveTheSameLosses) {
  const int steps = 20;
  std::vector<std::vector<nlohmann::json>> runs;
  for (int world : {1, 2, 4}) {
    const std::string run = temp_dir("dist_w" + std::to_string(world));
    auto r = run_shell(tandem_command(world, "train " + train_args(run, steps)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::to_string(world) + " rank(s)"), std::string::npos) << r.output;
    runs.push_back(read_metrics(run));
    ASSERT_EQ(runs.back().size(), static_cast<std::size_t>(steps)) << "W=" << world;
  }
  expect_close_losses(runs[0], runs[1], 0, "W=1 vs W=2");
  expect_close_losses(runs[0], runs[2], 0, "W=1 vs W=4");
}

// MFU with W ranks divides by the stated peak of all W devices: the global tokens/s of W ranks
// doing the same per-rank work as one rank gives the same MFU, not W times it.
TEST(DataParallel, MfuDividesByThePeakOfEveryRank) {
  for (int world : {1, 2}) {
    const std::string run = temp_dir("dist_mfu_w" + std::to_string(world));
    auto r = run_shell(
        tandem_command(world, "train " + train_args(run, 3) + " trainer.peak_tflops=0.05"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("MFU peak: 50.0 GFLOP/s per device x " + std::to_string(world)),
              std::string::npos)
        << r.output;
    const train::RunConfig rc = train::load_run_config(fixture("train/parity.yaml"), {});
    const double fpt = rc.model.flops_per_token(rc.data.sequence_length);
    for (const auto& rec : read_metrics(run)) {
      const double mfu = rec["mfu"].get<double>();
      EXPECT_NEAR(mfu, rec["tokens_per_s"].get<double>() * fpt / (world * 0.05e12), 1e-9 * mfu)
          << "W=" << world;
    }
  }
}

TEST(DataParallel, ElasticResumeFromW4AtW1AndW2) {
  const int steps = 20, at = 10;
  const std::string straight = temp_dir("dist_elastic_w4");
  auto r = run_shell(tandem_command(
      4, "train " + train_args(straight, steps) + " trainer.save_interval=10 trainer.keep_last=5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = read_metrics(straight);
  const std::string ckpt = "checkpoints/step-0000" + std::to_string(at);
  ASSERT_TRUE(fs::exists(straight + "/" + ckpt + "/manifest.json"));
  EXPECT_EQ(read_json(straight + "/" + ckpt + "/state.json")["world_size"], 4);
  // Every rank wrote its quarter of the replicated weights and moments (no whole file on rank 0);
  // the indices tile every parameter (checked when written and by the resumes below).
  const std::int64_t params =
      read_json(straight + "/" + ckpt + "/model/shards.json")["tensors"].size();
  EXPECT_GT(params, 0);
  EXPECT_FALSE(fs::exists(straight + "/" + ckpt + "/model/model.safetensors"));
  for (const char* part : {"model", "optim"}) {
    std::vector<std::uintmax_t> sizes;
    for (int s = 0; s < 4; ++s)
      sizes.push_back(fs::file_size(straight + "/" + ckpt + "/" + part +
                                    fmt::format("/shard-{:05d}-of-00004.safetensors", s)));
    // Equal shares of the flat buffer: the files differ by their headers only (a few KiB).
    const auto [small, large] = std::minmax_element(sizes.begin(), sizes.end());
    EXPECT_LT(*large - *small, 16384u) << part;
  }

  for (int world : {1, 2, 4}) {
    const std::string run = temp_dir("dist_elastic_resume_w" + std::to_string(world));
    fs::create_directories(run + "/checkpoints");
    fs::copy(straight + "/" + ckpt, run + "/" + ckpt, fs::copy_options::recursive);
    fs::copy_file(straight + "/metrics.jsonl", run + "/metrics.jsonl");  // trimmed on resume
    auto rr = run_shell(tandem_command(world, "train " + train_args(run, steps)));
    ASSERT_EQ(rr.exit_code, 0) << rr.output;
    EXPECT_NE(rr.output.find("resumed from"), std::string::npos) << rr.output;
    EXPECT_NE(rr.output.find("step " + std::to_string(at)), std::string::npos) << rr.output;
    const std::string what = "W=4 -> W=" + std::to_string(world);
    expect_close_losses(reference, read_metrics(run), at, what);
    if (world == 4) {
      // At the same world size the shards reassemble the exact state: bit for bit.
      const auto resumed = read_metrics(run);
      for (std::size_t i = at; i < reference.size(); ++i)
        EXPECT_EQ(reference[i]["train/loss"], resumed[i]["train/loss"]) << "step " << i + 1;
    }
    // Same global batches: the loader ends in the same (world-size-free) state.
    const std::string last = "/checkpoints/step-0000" + std::to_string(steps) + "/state.json";
    EXPECT_EQ(read_json(straight + last)["loader"], read_json(run + last)["loader"]) << what;
    EXPECT_EQ(read_json(run + last)["world_size"], world);
  }

  // The data audit proves the switch: same global batches, each instance once.
  auto audit =
      run_shell(std::string(TANDEM_BINARY) + " data audit " + fixture("train/parity.yaml") +
                " --world-sizes 1,2,4 --resume-at 10:1 --resume-at 10:2 --no-duplicates");
  EXPECT_EQ(audit.exit_code, 0) << audit.output;
  EXPECT_NE(audit.output.find("resume at step 10 from world size 4 to 1"), std::string::npos)
      << audit.output;
}

TEST(DataParallel, CheckpointFromTwoThreadsResumesOnOneThread) {
  const int steps = 20, at = 10;
  const std::string straight = temp_dir("dist_threads2");
  auto r = run_shell(tandem_command(
      1, "train " + train_args(straight, steps) + " trainer.save_interval=10 trainer.keep_last=5",
      2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = temp_dir("dist_threads1_w2");
  const std::string ckpt = "checkpoints/step-0000" + std::to_string(at);
  fs::create_directories(run + "/checkpoints");
  fs::copy(straight + "/" + ckpt, run + "/" + ckpt, fs::copy_options::recursive);
  fs::copy_file(straight + "/metrics.jsonl", run + "/metrics.jsonl");
  auto rr = run_shell(tandem_command(2, "train " + train_args(run, steps), 1));
  ASSERT_EQ(rr.exit_code, 0) << rr.output;
  EXPECT_NE(rr.output.find("resumed from"), std::string::npos) << rr.output;
  expect_close_losses(read_metrics(straight), read_metrics(run), at,
                      "2 threads W=1 -> 1 thread W=2");
}

// trainer.profile_step on two ranks: each rank writes its own profile, whose op FLOPs are the
// MFU's count for its half of the step's tokens.
TEST(DataParallel, EachRankProfilesItsShareOfTheStep) {
  const std::string run = temp_dir("dist_profile_w2");
  auto r = run_shell(tandem_command(2, "train " + train_args(run, 2) + " trainer.profile_step=2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = read_metrics(run);
  ASSERT_EQ(metrics.size(), 2u);
  const std::int64_t step_tokens =
      metrics[1]["tokens"].get<std::int64_t>() - metrics[0]["tokens"].get<std::int64_t>();
  const train::RunConfig config = train::load_run_config(fixture("train/parity.yaml"), {});
  const double per_token = config.model.flops_per_token(config.data.sequence_length);
  for (int rank : {0, 1}) {
    const nlohmann::json p =
        read_json(run + "/profile/step-000002.rank-" + std::to_string(rank) + ".json");
    EXPECT_EQ(p["rank"], rank);
    EXPECT_EQ(p["tokens"].get<std::int64_t>(), step_tokens / 2) << rank;
    EXPECT_DOUBLE_EQ(p["mfu_flops"].get<double>(),
                     per_token * static_cast<double>(step_tokens / 2));
    EXPECT_DOUBLE_EQ(p["flops"].get<double>(), p["mfu_flops"].get<double>()) << rank;
  }
}

}  // namespace
}  // namespace tandem
