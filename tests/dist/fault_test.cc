// Faults under mpirun: one rank SIGKILLed mid-run makes the whole job exit non-zero within 60 s
// with a message naming that rank; the last checkpoint stays valid and a restart with one rank
// fewer resumes from it and finishes. A save that fails on one rank only (its optimizer shard
// hits a file-size limit, as a full disk would) fails the job and leaves the previous checkpoint.
// A newest checkpoint damaged in a file another rank than 0 checks is passed over by every rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist_test_util.h"
#include "job_control.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using namespace dist_testing;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Faults, HungRankEndsTheJobWithinTheTimeout) {
  const std::string run = temp_dir("dist_hang");
  const std::string log = run + "/job.log";
  pid_t job = start_job(
      "TANDEM_DIST_TIMEOUT_S=5 " + tandem_command(2, "train " + train_args(run, 400)), log);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_for_steps(job, run, 5)) << slurp(log);
  pid_t victim = testing::rank_pid_below(job, 1);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);  // alive but making no progress
  int status = 0;
  const double seconds = wait_for_exit(job, &status, std::chrono::seconds(60));
  kill(victim, SIGKILL);  // in case mpirun left it behind
  const std::string output = slurp(log);
  ASSERT_GE(seconds, 0.0) << "the job still ran 60 s after rank 1 hung\n" << output;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("rank 0 of 2: all_reduce_sum made no progress"), std::string::npos)
      << output;
  // Rank 0 gathers rank 1's contribution: it names rank 1 as the one it waits for, first in a
  // notice at a quarter of the timeout, then in the final message.
  EXPECT_NE(output.find("all_reduce_sum has waited "), std::string::npos) << output;
  EXPECT_NE(output.find(" s for rank 1 on host "), std::string::npos) << output;
  EXPECT_NE(output.find("(TANDEM_DIST_TIMEOUT_S), waiting for rank 1 on host "), std::string::npos)
      << output;
}

TEST(Faults, KilledRankEndsTheJobThenFewerRanksResume) {
  const int steps = 40, world = 4, victim = 2;
  const std::string run = temp_dir("dist_fault");
  // 12 instances per global batch so that both 4 and 3 ranks get an equal share.
  const std::string args = "train " + train_args(run, steps) +
                           " data.global_batch_size=768 data.micro_batch_size=1"
                           " trainer.save_interval=5 trainer.keep_last=2";
  const std::string log = run + "/job.log";
  pid_t job = start_job(tandem_command(world, args), log);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_for_steps(job, run, 13)) << slurp(log);
  pid_t rank_pid = testing::rank_pid_below(job, victim);
  ASSERT_GT(rank_pid, 0) << "rank " << victim << " not found among mpirun's children";
  ASSERT_EQ(kill(rank_pid, SIGKILL), 0);
  int status = 0;
  const double seconds = wait_for_exit(job, &status, std::chrono::seconds(60));
  ASSERT_GE(seconds, 0.0) << "the job still ran 60 s after rank " << victim << " was killed";
  const std::string output = slurp(log);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("rank " + std::to_string(victim)), std::string::npos) << output;
  const std::size_t lines_at_kill = read_metrics(run).size();
  ASSERT_LT(lines_at_kill, static_cast<std::size_t>(steps));

  // Restart on one rank fewer: resumes from the last complete checkpoint and finishes.
  auto r = run_shell(tandem_command(world - 1, args));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  auto metrics = read_metrics(run);
  ASSERT_EQ(metrics.size(), static_cast<std::size_t>(steps));
  for (std::size_t i = 0; i < metrics.size(); ++i) EXPECT_EQ(metrics[i]["step"], i + 1);
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-0000" + std::to_string(steps)));
}

TEST(Faults, SaveFailingOnOneRankKeepsThePreviousCheckpoint) {
  const std::string run = temp_dir("dist_fault_save");
  ASSERT_EQ(run_shell(tandem_command(2, "train " + train_args(run, 3) + " dist.strategy=zero1"))
                .exit_code,
            0);
  // Resume to step 40, saving at step 15; once training runs, rank 1 alone gets a 100 KB
  // file-size limit, so its ~290 KB optimizer shard cannot be written at the step-15 save.
  const std::string log = run + "/job.log";
  pid_t job = start_job(tandem_command(2, "train " + train_args(run, 40) +
                                              " dist.strategy=zero1 trainer.save_interval=15"),
                        log);
  ASSERT_GT(job, 0);
  ASSERT_TRUE(wait_for_steps(job, run, 5)) << slurp(log);
  pid_t rank1 = testing::rank_pid_below(job, 1);
  ASSERT_GT(rank1, 0);
  const rlimit limit{100 * 1024, 100 * 1024};
  ASSERT_EQ(prlimit(rank1, RLIMIT_FSIZE, &limit, nullptr), 0);
  int status = 0;
  ASSERT_GE(wait_for_exit(job, &status, std::chrono::seconds(60)), 0.0) << slurp(log);
  const std::string output = slurp(log);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("saving checkpoint"), std::string::npos) << output;
  EXPECT_NE(output.find("File too large"), std::string::npos) << output;
  EXPECT_LT(read_metrics(run).size(), 40u);
  auto cps = train::list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(cps.size(), 1u) << output;
  EXPECT_EQ(fs::path(cps[0]).filename(), "step-000003");
  EXPECT_NO_THROW(train::verify_checkpoint(cps[0]));
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos) << e.path();
}

// The ranks check a checkpoint together (each file hashed by one rank) and must still agree: a
// damaged file in the newest one, hashed by rank 1, makes both ranks pass it over and resume from
// the one before, and the run ends as an uninterrupted one does.
TEST(Faults, DamagedNewestCheckpointIsPassedOverByEveryRank) {
  const int steps = 8;
  const std::string straight = temp_dir("dist_damaged_straight");
  auto r =
      run_shell(tandem_command(2, "train " + train_args(straight, steps) + " dist.strategy=zero1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = temp_dir("dist_damaged_newest");
  r = run_shell(tandem_command(
      2, "train " + train_args(run, 6) + " dist.strategy=zero1 trainer.save_interval=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The model (the largest file) is rank 0's to hash, the second optimizer shard rank 1's.
  const std::string shard = run + "/checkpoints/step-000006/optim/shard-00001-of-00002.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << shard;
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 3));
    f.put('\x7f');
  }
  r = run_shell(tandem_command(2, "train " + train_args(run, steps) + " dist.strategy=zero1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string skipped = "skipping damaged checkpoint: checkpoint file " + shard;
  EXPECT_NE(r.output.find(skipped), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(skipped), r.output.rfind(skipped)) << "said once (rank 0)\n" << r.output;
  EXPECT_NE(r.output.find("resumed from " + run + "/checkpoints/step-000003 (step 3"),
            std::string::npos)
      << r.output;
  expect_close_losses(read_metrics(straight), read_metrics(run), 0, "resumed past a damaged one");
}

}  // namespace
}  // namespace tandem
