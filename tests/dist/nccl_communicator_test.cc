// Communicator selection (TANDEM_COMMUNICATOR) everywhere, and, when tandem is built with NCCL and
// a GPU is present, the NCCL communicator itself: nccl_selftest under mpirun (every collective
// against host-computed sums) and `tandem train` over NCCL against the MPI run of the same config.
// Without a GPU the NCCL runs skip, saying why.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "dist_test_util.h"
#include "tandem/core/error.h"
#include "tandem/dist/communicator.h"
#ifdef TANDEM_HAVE_NCCL
#include "tandem/dist/nccl_communicator.h"
#endif

namespace tandem {
namespace {

using namespace dist_testing;

std::string error_of_make_communicator() {
  try {
    dist::make_communicator();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CommunicatorSelection, SingleCanBeForced) {
  testing::ScopedEnv choice("TANDEM_COMMUNICATOR", "single");
  EXPECT_EQ(dist::make_communicator()->name(), "single");
}

TEST(CommunicatorSelection, UnknownNameIsAnError) {
  testing::ScopedEnv choice("TANDEM_COMMUNICATOR", "carrier-pigeon");
  const std::string error = error_of_make_communicator();
  EXPECT_NE(error.find("TANDEM_COMMUNICATOR=carrier-pigeon: expected nccl, mpi or single"),
            std::string::npos)
      << error;
}

TEST(CommunicatorSelection, SingleUnderALauncherOfSeveralProcessesIsAnError) {
  testing::ScopedEnv choice("TANDEM_COMMUNICATOR", "single");
  testing::ScopedEnv launcher("OMPI_COMM_WORLD_SIZE", "2");
  const std::string error = error_of_make_communicator();
  EXPECT_NE(error.find("the launcher started 2 processes"), std::string::npos) << error;
}

// The error a user sees from `tandem train` when NCCL cannot be used here; the run that can use
// it is below.
TEST(CommunicatorSelection, NcclWhereItCannotRunIsAClearError) {
  std::string env = "TANDEM_COMMUNICATOR=nccl ";
#if defined(TANDEM_EMULATED_CUDA)
  // The CUDA emulator's machine without its GPUs.
  env += "TANDEM_CUDA_EMULATOR_DEVICES=0 ";
  const std::string expected = "TANDEM_COMMUNICATOR=nccl: no usable CUDA device";
#elif defined(TANDEM_HAVE_NCCL)
  if (dist::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: NCCL can run here";
  const std::string expected = "TANDEM_COMMUNICATOR=nccl: no usable CUDA device";
#else
  const std::string expected = "TANDEM_COMMUNICATOR=nccl: this tandem was built without NCCL";
#endif
  const std::string run = temp_dir("nccl_unusable");
  auto r = run_shell(env + tandem_command(1, "train " + train_args(run, 1)));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/metrics.jsonl")) << "it trained anyway";
}

#ifdef TANDEM_HAVE_NCCL

// NCCL refuses two ranks on one device, so a world of W needs W devices.
void skip_without_devices(int world) {
  std::string why;
  const int devices = dist::cuda_device_count(&why);
  if (devices < world)
    GTEST_SKIP() << world << " rank(s) need " << world << " CUDA device(s), this machine has "
                 << devices << (devices == 0 ? " (" + why + ")" : "");
}

std::string mpirun(int world) {
  return "TANDEM_DIST_TIMEOUT_S=120 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root "
         "-np " +
         std::to_string(world) + " ";
}

void expect_selftest_passes(int world) {
  auto r = run_shell(mpirun(world) + TANDEM_NCCL_SELFTEST);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nccl_selftest: " + std::to_string(world) + " ranks"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" 0 failed in total"), std::string::npos) << r.output;
}

TEST(NcclCommunicator, SelfTestOnOneRank) {
  skip_without_devices(1);
  if (IsSkipped()) return;
  expect_selftest_passes(1);
}

TEST(NcclCommunicator, SelfTestOnTwoRanksWithUnevenRanges) {
  skip_without_devices(2);
  if (IsSkipped()) return;
  expect_selftest_passes(2);
}

// A device collective a peer never joins, waited for on the host through a stream ordered after
// it (FSDP's compute stream waits on its unit gathers so): the watchdog ends the job after
// TANDEM_DIST_TIMEOUT_S (3 s here) with the collective's name, long before the peer's 60 s sleep
// would end it.
TEST(NcclCommunicator, WatchdogEndsAHostWaitOnADeviceCollectiveAPeerNeverJoins) {
  skip_without_devices(2);
  if (IsSkipped()) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_shell(
      "TANDEM_DIST_TIMEOUT_S=3 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np "
      "2 " +
      std::string(TANDEM_NCCL_SELFTEST) + " --peer-never-joins");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 waits for a gather"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device collectives (gradient sums, unit gathers)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("made no progress for"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("the wait returned"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 45.0) << r.output;
}

void expect_nccl_training_matches_mpi(int world) {
  const int steps = 20;
  const std::string mpi_run = temp_dir("nccl_vs_mpi_w" + std::to_string(world));
  auto r = run_shell(mpirun(world) + TANDEM_BINARY + " train " + train_args(mpi_run, steps));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = read_metrics(mpi_run);
  ASSERT_EQ(reference.size(), static_cast<std::size_t>(steps));

  for (const std::string zero1 : {"false", "true"}) {
    const std::string what = "NCCL W=" + std::to_string(world) + " zero1=" + zero1;
    const std::string run = temp_dir("nccl_train_w" + std::to_string(world) + "_zero1_" + zero1);
    auto rn = run_shell("TANDEM_COMMUNICATOR=nccl " + mpirun(world) + TANDEM_BINARY + " train " +
                        train_args(run, steps) +
                        " dist.strategy=" + std::string(zero1 == "true" ? "zero1" : "ddp"));
    ASSERT_EQ(rn.exit_code, 0) << what << "\n" << rn.output;
    EXPECT_NE(rn.output.find("on CUDA device"), std::string::npos) << what << "\n" << rn.output;
    EXPECT_NE(rn.output.find(std::to_string(world) + " rank(s)"), std::string::npos) << rn.output;
    expect_close_losses(reference, read_metrics(run), 0, what + " vs MPI");
  }
}

TEST(NcclTraining, MatchesMpiOnOneRank) {
  skip_without_devices(1);
  if (IsSkipped()) return;
  expect_nccl_training_matches_mpi(1);
}

TEST(NcclTraining, MatchesMpiOnTwoRanks) {
  skip_without_devices(2);
  if (IsSkipped()) return;
  expect_nccl_training_matches_mpi(2);
}

#else

TEST(NcclCommunicator, NotCompiledIn) {
  GTEST_SKIP() << "tandem was built without NCCL (no CUDA toolkit with NCCL at configure time)";
}

#endif

}  // namespace
}  // namespace tandem
