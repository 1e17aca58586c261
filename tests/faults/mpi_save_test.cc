// The fault matrix under mpirun: a rank that dies inside a checkpoint write (after writing its
// optimizer shard, before rank 0 indexes and renames the checkpoint) ends the job; the previous
// checkpoint stays intact and a resume on the same ranks is bit-identical to an uninterrupted
// data-parallel run. SIGUSR1 to mpirun, or to one rank only, stops every rank at one step
// boundary with a checkpoint of that step, and the job resumes bit-identically; so does
// scripts/slurm_train.sh on the signals Slurm sends it (time limit) or its ranks (preemption).
#include <fmt/format.h>

#include "fault_test_util.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;
using namespace train;

using namespace fault_testing;

std::string mpi_train(const std::string& run, int steps, const std::string& env = "") {
  return "env OMP_NUM_THREADS=1 " + env + " mpirun --oversubscribe --allow-run-as-root -np 2 " +
         TANDEM_BINARY + " train " + train_args(run, steps) +
         " dist.strategy=zero1 data.micro_batch_size=2";
}

// `command` resumes `run`, which then matches the uninterrupted `reference` of `steps` steps bit
// for bit: every logged step, the final weights and Adam moments.
void expect_resume_matches(const std::string& command, const std::string& reference,
                           const std::string& run, int steps) {
  auto done = run_shell(command);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("resumed from"), std::string::npos) << done.output;
  expect_bit_identical(reference, run, steps);
}

constexpr int kSignalledSteps = 40;
const char* const kNoSaveInterval = " trainer.save_interval=1000";

// The uninterrupted two-rank zero1 run the SIGUSR1 tests resume to, made once per build.
std::string signalled_runs_reference() {
  return shared_reference_run("mpi_zero1_40", [](const std::string& dir) {
    return mpi_train(dir, kSignalledSteps) + kNoSaveInterval;
  });
}

// `launch`, two ranks of zero1 for kSignalledSteps steps in the folder `run`, started in the
// background and sent `sig` after three steps: to the launched process (mpirun, or the Slurm
// script) when `signalled_ranks` is empty, else to those ranks of the mpirun below it. Every rank
// stops at the same step boundary, the checkpoint of the step the log records last holds both
// ranks' shards, the launcher ends with 128 + `sig` (each rank's status, whichever got the
// signal), and `launch` again resumes the job and matches the uninterrupted one bit for bit.
void expect_stop_saves_and_resumes(const std::string& run, const std::string& launch, int sig,
                                   const std::vector<int>& signalled_ranks) {
  const std::string reference = signalled_runs_reference();
  fs::create_directories(run);
  const std::string log = run + "/launch.log";
  const pid_t launcher = start_command(launch, log);
  ASSERT_TRUE(wait_for_steps(launcher, run, 3)) << read_file(log);
  std::vector<pid_t> targets;
  for (int rank : signalled_ranks) targets.push_back(testing::rank_pid_below(launcher, rank));
  if (signalled_ranks.empty()) targets.push_back(launcher);
  for (pid_t target : targets)
    ASSERT_GT(target, 0) << "a signalled rank not found under " << launcher;
  for (pid_t target : targets) ASSERT_EQ(kill(target, sig), 0);
  EXPECT_EQ(wait_exit_code(launcher), 128 + sig) << read_file(log);
  const std::string output = read_file(log);
  EXPECT_NE(output.find(fmt::format("signal {} received: saving", sig)), std::string::npos)
      << output;
  const std::size_t logged = metric_lines(run);
  ASSERT_LT(logged, static_cast<std::size_t>(kSignalledSteps)) << output;
  auto cps = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(cps.size(), 1u) << output;
  const std::string last = checkpoint_dir_name(static_cast<std::int64_t>(logged));
  EXPECT_EQ(fs::path(cps[0]).filename(), last) << output;
  EXPECT_NO_THROW(verify_checkpoint(cps[0]));
  for (int shard = 0; shard < 2; ++shard)
    EXPECT_TRUE(fs::exists(cps[0] + "/optim/" + optimizer_shard_file_name(shard, 2))) << shard;

  expect_resume_matches(launch, reference, run, kSignalledSteps);
}

// scripts/slurm_train.sh without Slurm, two ranks, in `run`, with a stand-in `scontrol` on PATH
// that records its arguments in run/scontrol.log; `env` adds variables.
std::string slurm_script(const std::string& run, const std::string& env) {
  const std::string bin = run + "/bin";
  fs::create_directories(bin);
  write_file_atomic(bin + "/scontrol", "#!/bin/sh\necho \"$@\" >> " + run + "/scontrol.log\n");
  fs::permissions(bin + "/scontrol", fs::perms::owner_all);
  return "env OMP_NUM_THREADS=1 SLURM_JOB_ID=4242 PATH=" + bin + ":$PATH TANDEM=" + TANDEM_BINARY +
         " " + env + " bash " + TANDEM_SOURCE_DIR + "/scripts/slurm_train.sh " +
         train_args(run, kSignalledSteps) + " dist.strategy=zero1 data.micro_batch_size=2" +
         kNoSaveInterval;
}

// What Slurm sends ahead of a time limit (docs/recipes.md): mpirun passes it on to every rank.
TEST(FaultMatrix, SigusrOneToMpirunStopsEveryRankWithACheckpointAndTheJobResumes) {
  const std::string run = temp_dir("fault_mpi_usr1_mpirun");
  expect_stop_saves_and_resumes(run, mpi_train(run, kSignalledSteps) + kNoSaveInterval, SIGUSR1,
                                {});
}

// Rank 1 alone: rank 0 learns of it in the step boundary's agreement and stops there too, by the
// same signal.
TEST(FaultMatrix, SigusrOneToOneRankStopsEveryRankAtTheSameStep) {
  const std::string run = temp_dir("fault_mpi_usr1_rank1");
  expect_stop_saves_and_resumes(run, mpi_train(run, kSignalledSteps) + kNoSaveInterval, SIGUSR1,
                                {1});
}

// The Slurm script: SIGUSR1 to the script (what `sbatch --signal=B:USR1@...` sends) reaches both
// ranks through mpirun, and the script requeues its job once (the resumed start is not signalled).
TEST(FaultMatrix, SlurmScriptPassesTheTimeLimitSignalOnAndRequeuesTheJob) {
  const std::string run = temp_dir("fault_slurm_run");
  const std::string script =
      slurm_script(run, "TANDEM_MPIRUN_ARGS='--oversubscribe --allow-run-as-root -np 2'");
  expect_stop_saves_and_resumes(run, script, SIGUSR1, {});
  EXPECT_EQ(read_file(run + "/scontrol.log"), "requeue 4242\n");
}

// The Slurm script with TANDEM_LAUNCHER=srun, srun's stand-in an mpirun of two ranks: a
// preemption's SIGTERM to the ranks alone (Slurm's grace-time signal to the step's tasks) stops
// both with a checkpoint, and the script requeues the job.
TEST(FaultMatrix, SlurmScriptUnderSrunRequeuesAJobWhoseRanksAloneGotSigterm) {
  const std::string run = temp_dir("fault_slurm_srun_run");
  fs::create_directories(run + "/bin");
  // srun's options (--mpi=pmix --kill-on-bad-exit=1) dropped; mpirun forwards signals as srun does.
  write_file_atomic(run + "/bin/srun",
                    "#!/bin/sh\nshift 2\nexec mpirun --oversubscribe --allow-run-as-root -np 2 "
                    "\"$@\"\n");
  fs::permissions(run + "/bin/srun", fs::perms::owner_all);
  expect_stop_saves_and_resumes(run, slurm_script(run, "TANDEM_LAUNCHER=srun"), SIGTERM, {0, 1});
  EXPECT_EQ(read_file(run + "/scontrol.log"), "requeue 4242\n");
}

TEST(FaultMatrix, DeadRankDuringASaveKeepsThePreviousCheckpoint) {
  const int steps = 8;
  const std::string reference = temp_dir("fault_mpi_reference");
  auto ref = run_shell(mpi_train(reference, steps));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  const std::string run = temp_dir("fault_mpi_dead_rank");
  // Rank 1 dies in the second save (step 4), right after writing its shard.
  auto r = run_shell(mpi_train(run, steps, "TANDEM_FAULT=checkpoint.shard:2 TANDEM_FAULT_RANK=1"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  auto cps = list_checkpoints(run + "/checkpoints");
  ASSERT_EQ(cps.size(), 1u) << r.output;
  EXPECT_EQ(fs::path(cps[0]).filename(), checkpoint_dir_name(2));
  EXPECT_NO_THROW(verify_checkpoint(cps[0]));

  expect_resume_matches(mpi_train(run, steps), reference, run, steps);
  const std::string cp = "/checkpoints/" + checkpoint_dir_name(steps);
  for (const char* part : {"model", "optim"})
    for (int shard = 0; shard < 2; ++shard)
      EXPECT_TRUE(fs::exists(run + cp + "/" + part + "/" + optimizer_shard_file_name(shard, 2)))
          << part << " shard " << shard;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace tandem
