// Data parallelism on the CUDA backend: `tandem train backend=cuda` on two ranks under mpirun with
// TANDEM_COMMUNICATOR=nccl sums the gradients on the device (dist/device_gradient_reduction.h), in
// buckets that the backward starts as it completes them, and follows the CPU backend's two-rank
// run (MPI) from the same weights and batches: per step within the 1e-4 relative that a one-rank
// GPU run keeps to the CPU's (training_test.cc). ZeRO-1 likewise, its reduce-scatter and gather
// on the device. And the setups it cannot run are refused by name.
// NCCL drives one GPU per rank, so the two-rank run needs two GPUs (the CUDA emulator has eight).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#ifdef TANDEM_HAVE_CUDA
#include "tandem/kernels/cuda/cuda_backend.h"
#endif

namespace tandem {
namespace {

using testing::fixture;
using testing::run_shell;

std::string ranks(int world) {
  return "TANDEM_DIST_TIMEOUT_S=300 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root "
         "-np " +
         std::to_string(world) + " " + testing::tandem_binary();
}

std::string rank_train_args(const std::string& backend, const std::string& run, int steps) {
  return " train " + fixture("train/parity.yaml") +
         " trainer.init_from=" + fixture("train/init_hf") + " trainer.save_folder=" + run +
         " trainer.max_steps=" + std::to_string(steps) +
         " trainer.progress=false evaluation.interval=0 data.micro_batch_size=2 backend=" + backend;
}

// mpirun is a launcher of the machine, not one of tandem's programs (the device check's machine
// may lack it).
#define REQUIRE_MPIRUN()                                                              \
  do {                                                                                \
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0)                        \
      GTEST_SKIP() << "mpirun is not on this machine's PATH (two-rank runs need it)"; \
  } while (0)

int gpu_count() {
#ifdef TANDEM_HAVE_CUDA
  return kernels::cuda_device_count();
#else
  return 0;
#endif
}

#define REQUIRE_TWO_GPUS_AND_NCCL()                                                            \
  do {                                                                                         \
    REQUIRE_GPU();                                                                             \
    REQUIRE_MPIRUN();                                                                          \
    if (!kHaveNccl) GTEST_SKIP() << "tandem was built without NCCL";                           \
    if (gpu_count() < 2)                                                                       \
      GTEST_SKIP() << "two ranks need two GPUs (NCCL refuses two ranks on one), this machine " \
                      "has "                                                                   \
                   << gpu_count();                                                             \
  } while (0)

#ifdef TANDEM_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

double relative_gap(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

// The two-rank GPU run (`gpu_extra` added) against the two-rank CPU run of the same strategy:
// tokens equal, losses and grad norms within 1e-4 relative per step. Returns the GPU run's output.
std::string expect_gpu_ranks_follow_cpu_ranks(const std::string& strategy, int steps,
                                              const std::string& gpu_extra) {
  const std::string cpu = testing::temp_dir("dp_cpu_w2_" + strategy);
  auto rc = run_shell(ranks(2) + rank_train_args("cpu", cpu, steps) + " dist.strategy=" + strategy);
  EXPECT_EQ(rc.exit_code, 0) << rc.output;
  const std::string gpu = testing::temp_dir("dp_cuda_w2_" + strategy);
  auto rg = run_shell("TANDEM_COMMUNICATOR=nccl " + ranks(2) + rank_train_args("cuda", gpu, steps) +
                      " dist.strategy=" + strategy + " " + gpu_extra);
  EXPECT_EQ(rg.exit_code, 0) << rg.output;
  EXPECT_NE(rg.output.find("data parallel: 2 rank(s)"), std::string::npos) << rg.output;

  const auto a = testing::read_metrics(cpu + "/metrics.jsonl");
  const auto b = testing::read_metrics(gpu + "/metrics.jsonl");
  EXPECT_EQ(a.size(), static_cast<std::size_t>(steps));
  EXPECT_EQ(b.size(), a.size());
  double worst_loss = 0, worst_norm = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]);
    const double dl =
        relative_gap(b[i]["train/loss"].get<double>(), a[i]["train/loss"].get<double>());
    const double dn =
        relative_gap(b[i]["train/grad_norm"].get<double>(), a[i]["train/grad_norm"].get<double>());
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    EXPECT_LE(dl, 1e-4) << strategy << ": loss at step " << a[i]["step"];
    EXPECT_LE(dn, 1e-4) << strategy << ": grad norm at step " << a[i]["step"];
  }
  ::testing::Test::RecordProperty("worst_loss_rel_vs_cpu_w2_" + strategy,
                                  fmt::format("{:.3g}", worst_loss));
  ::testing::Test::RecordProperty("worst_grad_norm_rel_vs_cpu_w2_" + strategy,
                                  fmt::format("{:.3g}", worst_norm));
  return rg.output;
}

TEST(CudaDataParallel, TwoRanksSumOnTheDeviceAndFollowTheCpuRanks) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  // Buckets of 0.05 MiB cut this model's 0.28 MiB of gradients into several, so that sums start
  // while the backward still runs (the default 25 MiB would be one bucket).
  const std::string out = expect_gpu_ranks_follow_cpu_ranks("ddp", 5, "dist.bucket_mb=0.05");
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m,
                        std::regex(R"(gradient reduction on the device \(nccl\): (\d+) )"
                                   R"(bucket\(s\) of up to [0-9.]+ MiB, (\d+) started by)")))
      << out;
  const int buckets = std::stoi(m[1]), started = std::stoi(m[2]);
  EXPECT_GE(buckets, 3) << out;
  // Every bucket is started by the backward's report of its last unit (the embedding's, last).
  EXPECT_EQ(started, buckets) << out;
}

// ZeRO-1: the gradients summed onto their owners in buckets the backward starts (a reduce-scatter
// overlapped with the backward), the updated parameters gathered on the device.
TEST(CudaDataParallel, ZeroOneReducesAndGathersOnTheDeviceAndFollowsTheCpuRanks) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  const std::string out = expect_gpu_ranks_follow_cpu_ranks("zero1", 4, "dist.bucket_mb=0.05");
  EXPECT_NE(out.find("zero1 optimiser"), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(R"(gradient reduction on the device \(nccl\): (\d+) bucket\(s\) of up to [0-9.]+ )"
                 R"(MiB, (\d+) started by the backward as it completed them; each summed onto )"
                 R"(the ranks that own its elements \(ZeRO-1\))")))
      << out;
  EXPECT_GE(std::stoi(m[1]), 3) << out;
  EXPECT_EQ(std::stoi(m[2]), std::stoi(m[1])) << out;
}

TEST(CudaDataParallel, HostCommunicatorIsRefusedByName) {
  REQUIRE_GPU();
  REQUIRE_MPIRUN();
  const std::string run = testing::temp_dir("dp_cuda_mpi");
  auto r = run_shell("TANDEM_COMMUNICATOR=mpi " + ranks(2) + rank_train_args("cuda", run, 2));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the mpi communicator reduces host memory (run with "
                          "TANDEM_COMMUNICATOR=nccl)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/metrics.jsonl")) << "it trained anyway";
}

TEST(CudaDataParallel, FsdpIsRefusedByName) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  const std::string run = testing::temp_dir("dp_cuda_fsdp");
  auto r = run_shell("TANDEM_COMMUNICATOR=nccl " + ranks(2) + rank_train_args("cuda", run, 2) +
                     " dist.strategy=fsdp");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dist.strategy fsdp gathers and reduces its units through host memory; "
                          "on this backend data parallelism is dist.strategy ddp or zero1"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/metrics.jsonl")) << "it trained anyway";
}

}  // namespace
}  // namespace tandem
