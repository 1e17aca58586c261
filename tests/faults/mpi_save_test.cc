// The fault matrix under mpirun: a rank that dies inside a checkpoint write (after writing its
// optimizer shard, before rank 0 indexes and renames the checkpoint) ends the job; the previous
// checkpoint stays intact and a resume on the same ranks is bit-identical to an uninterrupted
// data-parallel run.
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

  auto done = run_shell(mpi_train(run, steps));
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("resumed from"), std::string::npos) << done.output;
  auto a = testing::read_metrics(reference + "/metrics.jsonl");
  auto b = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"step", "tokens", "train/loss", "train/grad_norm", "lr"})
      EXPECT_EQ(a[i][key], b[i][key]) << key << " at line " << i;
  expect_same_weights_and_moments(reference, run, steps);
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
