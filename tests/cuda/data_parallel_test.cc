// Data parallelism on the CUDA backend: `tandem train backend=cuda` on two ranks under mpirun with
// TANDEM_COMMUNICATOR=nccl sums the gradients on the device (dist/device_gradient_reduction.h), in
// buckets that the backward starts as it completes them, and follows the CPU backend's two-rank
// run (MPI) from the same weights and batches: per step within the 1e-4 relative that a one-rank
// GPU run keeps to the CPU's (training_test.cc). ZeRO-1 likewise, its reduce-scatter and gather
// on the device; FSDP and HSDP with their unit gathers and reduces on the device, checkpoints
// that resume on either backend, and bf16 units that are the replicated run's bits. And the setups
// it cannot run are refused by name.
// NCCL drives one GPU per rank, so the two-rank run needs two GPUs (the CUDA emulator has eight).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/io/safetensors.h"
#ifdef TANDEM_HAVE_CUDA
#include "tandem/kernels/cuda/cuda_backend.h"
#endif

namespace tandem {
namespace {

using testing::fixture;
using testing::run_shell;

namespace fs = std::filesystem;

std::string ranks(int world) {
  return "TANDEM_DIST_TIMEOUT_S=300 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root "
         "-np " +
         std::to_string(world) + " " + testing::tandem_binary();
}

// Steps of 4 instances of 64 tokens (half the fixture's batch), one per micro-batch: two
// micro-batches per rank at W=2, so gradients accumulate before they are reduced; no held-out
// evaluation (the fixture's set would cost more than two steps at the end of every run). CI runs
// these tests emulated under ASan, where their time is proportional to the tokens; what they check
// (the collectives, units, buckets and checkpoints) does not depend on how many there are.
std::string rank_train_args(const std::string& backend, const std::string& run, int steps) {
  return " train " + fixture("train/parity.yaml") +
         " trainer.init_from=" + fixture("train/init_hf") + " trainer.save_folder=" + run +
         " trainer.max_steps=" + std::to_string(steps) +
         " trainer.progress=false evaluation.interval=0 'evaluation.sets=[]'"
         " data.global_batch_size=256 data.micro_batch_size=1 backend=" +
         backend;
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

// `world` ranks of `tandem train` on `backend` (the GPU's with NCCL), `extra` added.
testing::CommandResult train_ranks(int world, const std::string& backend, const std::string& run,
                                   int steps, const std::string& extra) {
  return run_shell((backend == "cuda" ? "TANDEM_COMMUNICATOR=nccl " : "") + ranks(world) +
                   rank_train_args(backend, run, steps) + " " + extra);
}

// Per step: tokens equal, losses and grad norms within `bound` relative of the reference's, from
// `first` (0-based) on. Returns the worst loss and grad-norm gaps.
std::pair<double, double> expect_steps_close(const std::string& reference_run,
                                             const std::string& run, std::size_t first,
                                             double bound, const std::string& what) {
  const auto a = testing::read_metrics(reference_run + "/metrics.jsonl");
  const auto b = testing::read_metrics(run + "/metrics.jsonl");
  EXPECT_EQ(b.size(), a.size()) << what;
  double worst_loss = 0, worst_norm = 0;
  for (std::size_t i = first; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]) << what;
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << what;
    const double dl =
        relative_gap(b[i]["train/loss"].get<double>(), a[i]["train/loss"].get<double>());
    const double dn =
        relative_gap(b[i]["train/grad_norm"].get<double>(), a[i]["train/grad_norm"].get<double>());
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    EXPECT_LE(dl, bound) << what << ": loss at step " << a[i]["step"];
    EXPECT_LE(dn, bound) << what << ": grad norm at step " << a[i]["step"];
  }
  return {worst_loss, worst_norm};
}

// The two runs' final checkpoints, written by two ranks each (every rank its share of the weights
// and moments, copied from the device on the GPU): the same shard files and tensors, each within
// `bound` relative L2 of the CPU run's. Returns the worst gap.
double expect_checkpoint_shards_close(const std::string& cpu, const std::string& gpu, int step,
                                      double bound) {
  const std::string last = fmt::format("/checkpoints/step-{:06d}/", step);
  double worst = 0;
  int tensors = 0;
  for (const char* part : {"model", "optim"}) {
    for (int shard = 0; shard < 2; ++shard) {
      const std::string file = fmt::format("{}/shard-{:05d}-of-00002.safetensors", part, shard);
      const io::SafetensorsFile a(cpu + last + file), b(gpu + last + file);
      EXPECT_EQ(a.names(), b.names()) << file;
      for (const std::string& name : a.names()) {
        if (!b.has(name)) continue;
        const std::vector<float> x = a.read_f32(name), y = b.read_f32(name);
        EXPECT_EQ(x.size(), y.size()) << file << " " << name;
        if (x.size() != y.size()) continue;
        double diff = 0, norm = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
          diff += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
          norm += double(x[i]) * x[i];
        }
        const double gap = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
        worst = std::max(worst, gap);
        ++tensors;
        EXPECT_LE(gap, bound) << file << " " << name;
      }
    }
  }
  EXPECT_GT(tensors, 0);
  return worst;
}

// The two-rank GPU run (`gpu_extra` added) against the two-rank CPU run of the same strategy:
// tokens equal, losses and grad norms within 1e-4 relative per step. Returns the GPU run's output
// (and its folder in *gpu_run when asked).
std::string expect_gpu_ranks_follow_cpu_ranks(const std::string& strategy, int steps,
                                              const std::string& gpu_extra,
                                              std::string* gpu_run = nullptr) {
  const std::string cpu = testing::temp_dir("dp_cpu_w2_" + strategy);
  auto rc = train_ranks(2, "cpu", cpu, steps, "dist.strategy=" + strategy);
  EXPECT_EQ(rc.exit_code, 0) << rc.output;
  const std::string gpu = testing::temp_dir("dp_cuda_w2_" + strategy);
  auto rg = train_ranks(2, "cuda", gpu, steps, "dist.strategy=" + strategy + " " + gpu_extra);
  EXPECT_EQ(rg.exit_code, 0) << rg.output;
  EXPECT_NE(rg.output.find("data parallel: 2 rank(s)"), std::string::npos) << rg.output;
  if (gpu_run) *gpu_run = gpu;

  EXPECT_EQ(testing::read_metrics(cpu + "/metrics.jsonl").size(), static_cast<std::size_t>(steps));
  const auto [worst_loss, worst_norm] = expect_steps_close(cpu, gpu, 0, 1e-4, strategy);
  ::testing::Test::RecordProperty("worst_loss_rel_vs_cpu_w2_" + strategy,
                                  fmt::format("{:.3g}", worst_loss));
  ::testing::Test::RecordProperty("worst_grad_norm_rel_vs_cpu_w2_" + strategy,
                                  fmt::format("{:.3g}", worst_norm));
  const double shards = expect_checkpoint_shards_close(cpu, gpu, steps, 1e-4);
  ::testing::Test::RecordProperty("worst_checkpoint_tensor_rel_vs_cpu_w2_" + strategy,
                                  fmt::format("{:.3g}", shards));
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

// One rank (the device check's machine has one GPU): FSDP's device path with no collectives, its
// masters initialised through weights()/weights_written(), bf16 units cast from them, gradients
// added into the shard by the backend, against the replicated run on the same GPU. Within the
// 1e-5 that the CPU's FSDP keeps to its replicated run (tests/dist/fsdp_test.cc): the gradient
// norm's sums of squares go per shard piece rather than per tensor.
TEST(CudaDataParallel, OneRankFsdpFollowsTheReplicatedRun) {
  REQUIRE_GPU();
  const int steps = 4;
  const std::string bf16 = " precision=bf16 data.micro_batch_size=2";
  const std::string ddp = testing::temp_dir("dp_cuda_w1_ddp");
  auto r = run_shell(testing::tandem_binary() + rank_train_args("cuda", ddp, steps) + bf16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string fsdp = testing::temp_dir("dp_cuda_w1_fsdp");
  r = run_shell(testing::tandem_binary() + rank_train_args("cuda", fsdp, steps) + bf16 +
                " dist.strategy=fsdp");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fsdp optimiser"), std::string::npos) << r.output;
  const auto [loss, norm] = expect_steps_close(ddp, fsdp, 0, 1e-5, "bf16 fsdp W=1 vs ddp W=1");
  RecordProperty("worst_loss_rel_fsdp_vs_ddp_w1", fmt::format("{:.3g}", loss));
  RecordProperty("worst_grad_norm_rel_fsdp_vs_ddp_w1", fmt::format("{:.3g}", norm));
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

// The start-up memory check takes every rank's device: with room for the run on rank 0's and, on
// rank 1's (the emulator's TANDEM_CUDA_EMULATOR_HELD_BYTES, set for rank 1 alone), for cuBLASLt's
// 32 MiB workspace, which the backend takes at start, and half the rest of the plan, rank 0 warns
// before the first step and names rank 1, whose first step then runs out of memory. Emulated only
// (the device's room is set only there).
TEST(CudaDataParallel, TheStartUpMemoryCheckTakesTheRankWithTheLeastRoom) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  REQUIRE_CUDA(gpu);
  if (gpu.describe().find("CUDA emulator") == std::string::npos)
    GTEST_SKIP() << "the device's free memory is set only on the CUDA emulator";
  const std::string run = testing::temp_dir("dp_cuda_preflight");
  const std::string args = rank_train_args("cuda", run, 1);
  auto p = testing::run_tandem("plan" + args.substr(args.find(' ', 1)) +
                               " --device h200 --world-size 2 --json");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const double planned =
      nlohmann::json::parse(p.output.substr(p.output.find('{'))).at("memory_backend").get<double>();
  const double workspace = 32.0 * 1024 * 1024;
  ASSERT_GT(planned, workspace + (1 << 20));
  const auto held = gpu.memory_stats().device_total -
                    static_cast<std::int64_t>(workspace + (planned - workspace) / 2);
  auto r = run_shell(
      fmt::format("TANDEM_COMMUNICATOR=nccl {} sh -c '[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && export "
                  "TANDEM_CUDA_EMULATOR_HELD_BYTES={}; exec \"$0\" \"$@\"' {} {}",
                  ranks(2).substr(0, ranks(2).rfind(' ')), held, testing::tandem_binary(), args));
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::regex warning(
      R"(room for (\d+) B \([^:]*: on rank 1's device, the least of the 2 ranks'[^\n]*\n)"
      R"((?:[^\n]*\n)*?WARNING: this run needs)");  // rank 1's own lines may come between
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, warning)) << r.output;
  EXPECT_LT(std::stod(m[1]), planned);
  EXPECT_NE(r.output.find("cannot allocate"), std::string::npos) << r.output;
}

// A run's checkpoint at `at` copied into a fresh run folder (with the metrics so far), to resume.
std::string resume_folder(const std::string& from, int at, const std::string& name) {
  const std::string run = testing::temp_dir(name);
  const std::string ckpt = fmt::format("checkpoints/step-{:06d}", at);
  fs::create_directories(run + "/checkpoints");
  fs::copy(from + "/" + ckpt, run + "/" + ckpt, fs::copy_options::recursive);
  fs::copy_file(from + "/metrics.jsonl", run + "/metrics.jsonl");
  return run;
}

// FSDP: every unit gathered on the device before its use and its gradient summed onto the owners
// of its elements right after its backward, with prefetch (no thread: the device orders them).
// The sharded checkpoint it writes resumes on the GPU bit for bit and on the CPU backend's FSDP
// (the hardware switch) within the CPU-vs-GPU bound.
TEST(CudaDataParallel, FsdpGathersAndReducesItsUnitsOnTheDeviceAndFollowsTheCpuRanks) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  const int steps = 4;
  const std::string save = "trainer.save_interval=2 trainer.keep_last=5";
  std::string gpu;
  const std::string out = expect_gpu_ranks_follow_cpu_ranks("fsdp", steps, save, &gpu);
  EXPECT_NE(out.find("fsdp optimiser"), std::string::npos) << out;
  EXPECT_NE(out.find("prefetch on (device collectives on their stream)"), std::string::npos) << out;
  for (int s = 0; s < 2; ++s)
    EXPECT_TRUE(fs::exists(gpu + fmt::format("/checkpoints/step-000002/model/"
                                             "shard-{:05d}-of-00002.safetensors",
                                             s)))
        << s;

  const std::string again = resume_folder(gpu, 2, "dp_cuda_w2_fsdp_resumed");
  auto r = train_ranks(2, "cuda", again, steps, "dist.strategy=fsdp");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_steps_close(gpu, again, 2, 0.0, "fsdp W=2 GPU -> GPU resume");

  const std::string on_cpu = resume_folder(gpu, 2, "dp_cuda_w2_fsdp_to_cpu");
  r = train_ranks(2, "cpu", on_cpu, steps, "dist.strategy=fsdp");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_steps_close(gpu, on_cpu, 2, 1e-4, "fsdp W=2 GPU -> CPU resume");
}

// HSDP 2x2 (shard groups and replicas split from the NCCL communicator) against the CPU's HSDP
// 2x2, with two micro-batches per rank: the replicas sum each unit's range of the gradient shard
// as the step's last backward adds it (a sum after the first micro-batch would count it twice);
// and bf16 units (gathered as bf16 bytes, full recompute) against the replicated GPU run: with
// one micro-batch per rank and two ranks FSDP adds the same two gradients, so the two follow each
// other as closely as the CPU's FSDP follows its replicated run (tests/dist/fsdp_test.cc: 1e-5).
TEST(CudaDataParallel, HsdpAndBf16UnitsOnTheDevice) {
  REQUIRE_TWO_GPUS_AND_NCCL();
  const int steps = 3;
  const std::string hsdp = "dist.strategy=hsdp dist.shard_group_size=2 data.global_batch_size=512";
  const std::string cpu = testing::temp_dir("dp_cpu_w4_hsdp");
  auto r = train_ranks(4, "cpu", cpu, steps, hsdp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string gpu = testing::temp_dir("dp_cuda_w4_hsdp");
  r = train_ranks(4, "cuda", gpu, steps, hsdp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hsdp optimiser"), std::string::npos) << r.output;
  // Every unit (the embedding, 4 blocks, the head) has elements on each rank.
  EXPECT_NE(r.output.find("replica sums on the device (nccl): the gradient shard summed across 2 "
                          "replicas in 6 unit range(s)"),
            std::string::npos)
      << r.output;
  const auto [loss, norm] = expect_steps_close(cpu, gpu, 0, 1e-4, "hsdp 2x2 GPU vs CPU");
  RecordProperty("worst_loss_rel_vs_cpu_w4_hsdp", fmt::format("{:.3g}", loss));
  RecordProperty("worst_grad_norm_rel_vs_cpu_w4_hsdp", fmt::format("{:.3g}", norm));

  // With full recompute: each block's units are acquired again for its backward.
  const std::string bf16 = "precision=bf16 data.micro_batch_size=2 trainer.recompute=full";
  const std::string ddp = testing::temp_dir("dp_cuda_w2_bf16_ddp");
  r = train_ranks(2, "cuda", ddp, steps, bf16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string fsdp = testing::temp_dir("dp_cuda_w2_bf16_fsdp");
  r = train_ranks(2, "cuda", fsdp, steps, bf16 + " dist.strategy=fsdp");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gathered unit weights"), std::string::npos) << r.output;
  expect_steps_close(ddp, fsdp, 0, 1e-5, "bf16 fsdp W=2 vs ddp W=2 on the GPU");
}

}  // namespace
}  // namespace tandem
