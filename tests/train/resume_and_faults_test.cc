// Checkpoint/resume and fault handling of `tandem train` on the small curve-parity data:
// SIGKILL at random steps then resume gives bit-identical weights and metrics, in fp32 and under
// the bf16 precision policy (the compute weights are recast from the restored masters); a damaged
// checkpoint is named and the previous one used; a failed save (file-size limit, as a full disk)
// leaves earlier checkpoints intact; repeated non-finite losses stop the run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;

std::string base_args(const std::string& run, int steps) {
  return fixture("train/parity.yaml") + " trainer.init_from=" + fixture("train/init_hf") +
         " trainer.save_folder=" + run + " trainer.max_steps=" + std::to_string(steps) +
         " trainer.save_interval=3 trainer.keep_last=2 trainer.progress=false "
         "evaluation.interval=6";
}

std::size_t metric_lines(const std::string& run) {
  if (!fs::exists(run + "/metrics.jsonl")) return 0;
  return testing::read_metrics(run + "/metrics.jsonl").size();
}

// Starts `tandem train`, waits until its metrics log has `lines` entries, then SIGKILLs it.
void kill_after(const std::string& args, const std::string& run, std::size_t lines) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string cmd = std::string(TANDEM_BINARY) + " train " + args + " > /dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (metric_lines(run) < lines && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return;  // finished before the kill point
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

void expect_same_run(const std::string& a, const std::string& b, int final_step) {
  auto ma = testing::read_metrics(a + "/metrics.jsonl");
  auto mb = testing::read_metrics(b + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), mb.size());
  for (std::size_t i = 0; i < ma.size(); ++i)
    for (const char* key :
         {"step", "tokens", "train/loss", "train/z_loss", "train/grad_norm", "lr"})
      EXPECT_EQ(ma[i][key], mb[i][key]) << key << " at line " << i;  // bit-identical doubles
  const std::string w = "/checkpoints/" + train::checkpoint_dir_name(final_step);
  EXPECT_EQ(core::read_file(a + w + "/model/model.safetensors"),
            core::read_file(b + w + "/model/model.safetensors"));
  const std::string shard = "/optim/" + train::optimizer_shard_file_name(0, 1);
  EXPECT_EQ(core::read_file(a + w + shard), core::read_file(b + w + shard));
}

class ResumeIn : public ::testing::TestWithParam<const char*> {};

TEST_P(ResumeIn, SigkillAtRandomStepsThenResumeIsBitIdentical) {
  const int steps = 18;
  const std::string precision = std::string(" precision=") + GetParam();
  const std::string straight = testing::temp_dir(std::string("resume_straight_") + GetParam());
  auto r = run_tandem("train " + base_args(straight, steps) + precision);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(std::string("precision: ") + GetParam()), std::string::npos) << r.output;

  const std::string killed = testing::temp_dir(std::string("resume_killed_") + GetParam());
  std::mt19937 rng(std::random_device{}());
  std::size_t at = 0;
  for (int round = 0; round < 3; ++round) {
    at = std::min<std::size_t>(steps - 1, at + 2 + rng() % 5);
    kill_after(base_args(killed, steps) + precision, killed, at);
  }
  auto done = run_tandem("train " + base_args(killed, steps) + precision);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("resumed from"), std::string::npos) << done.output;
  expect_same_run(straight, killed, steps);
}

INSTANTIATE_TEST_SUITE_P(Precisions, ResumeIn, ::testing::Values("fp32", "bf16"),
                         testing::ParamName());

// AI2's stage 1 ended at a hard stop part-way along its schedule: OLMo-core's hard_stop ends the
// run there with a checkpoint, the schedule keeping max_duration's horizon; the same run resumed
// without the hard stop then continues as if never stopped (bit-identical).
TEST(Resume, HardStopThenResumeWithoutItIsTheUninterruptedRun) {
  const int steps = 12;
  const std::string straight = testing::temp_dir("resume_hard_stop_straight");
  auto r = run_tandem("train " + base_args(straight, steps));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::string stopped = testing::temp_dir("resume_hard_stop");
  r = run_tandem("train " + base_args(stopped, steps) +
                 " 'trainer.hard_stop={value: 7, unit: steps}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hard stop at step 7; the schedule's horizon is max_duration's 12 steps"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(metric_lines(stopped), 7u);
  EXPECT_TRUE(fs::exists(stopped + "/checkpoints/" + train::checkpoint_dir_name(7)));
  r = run_tandem("train " + base_args(stopped, steps));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_run(straight, stopped, steps);
}

TEST(Resume, DamagedCheckpointIsNamedAndThePreviousOneUsed) {
  const std::string run = testing::temp_dir("resume_damaged");
  ASSERT_EQ(run_tandem("train " + base_args(run, 6)).exit_code, 0);
  // Corrupt the newest checkpoint (step 6): truncate its weights.
  const std::string bad = run + "/checkpoints/step-000006/model/model.safetensors";
  fs::resize_file(bad, fs::file_size(bad) / 2);
  auto r = run_tandem("train " + base_args(run, 9));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step-000006"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step-000003"), std::string::npos) << r.output;
  // And the result equals a clean run to step 9.
  const std::string clean = testing::temp_dir("resume_damaged_clean");
  ASSERT_EQ(run_tandem("train " + base_args(clean, 9)).exit_code, 0);
  expect_same_run(clean, run, 9);
}

TEST(Resume, FailedSaveKeepsThePreviousCheckpoint) {
  const std::string run = testing::temp_dir("resume_disk_full");
  ASSERT_EQ(run_tandem("train " + base_args(run, 3)).exit_code, 0);
  // A 400 KB file-size limit lets the run resume but makes the optimizer-state file of the next
  // save fail mid-write (EFBIG), as a full disk would.
  auto r = testing::run_shell("ulimit -f 400 && " + std::string(TANDEM_BINARY) + " train " +
                              base_args(run, 6));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("saving checkpoint"), std::string::npos) << r.output;
  auto cps = train::list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_NO_THROW(train::verify_checkpoint(cps[0]));
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos) << e.path();
}

TEST(NonFinite, RepeatedNonFiniteLossesStopTheRun) {
  const std::string run = testing::temp_dir("nonfinite");
  ASSERT_EQ(run_tandem("train " + base_args(run, 3)).exit_code, 0);
  // An absurd learning rate overflows the weights; the following losses are not finite.
  auto r = run_tandem("train " + base_args(run, 30) +
                      " optim.lr=1e36 scheduler.warmup=0 trainer.max_consecutive_nonfinite=3");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("consecutive non-finite"), std::string::npos) << r.output;
  auto metrics = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  EXPECT_GE(metrics.back()["nonfinite_steps"].get<int>(), 3);
  for (const auto& cp : train::list_checkpoints(run + "/checkpoints"))
    EXPECT_NO_THROW(train::verify_checkpoint(cp));
}

TEST(TrainConfig, ValidationFileThatIsAlsoTrainingIsRefused) {
  auto r = run_tandem("train " + base_args(testing::temp_dir("overlap"), 2) +
                      " 'evaluation.sets=[{name: leak, paths: [train_b.npy]}]'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("also a training file"), std::string::npos) << r.output;
}

TEST(TrainConfig, UnknownKeyIsNamed) {
  auto r =
      run_tandem("train " + base_args(testing::temp_dir("unknown"), 2) + " trainer.max_stpes=3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("trainer.max_stpes"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
