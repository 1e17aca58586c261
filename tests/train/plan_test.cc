// `tandem plan` (train/plan.h) against the trainer's own accounting: on the curve-parity config,
// for each recompute policy under fp32 and two under bf16, the planned parameters, compute weights,
// gradients, Adam moments and activations are the numbers `tandem train` logs, and the planned
// backend memory is the backend's measured peak during the first step, to the byte. Plus the
// planner's rules on configs too large to run here (OLMo 3 7B): replicated state is 16 bytes per
// parameter, ZeRO-1 divides the moments, FSDP divides parameters, gradients and moments, recompute
// lowers activations, a batch that does not split over the ranks is an error that says what
// would, and on a GPU ddp's and zero1's gradient sums overlap the last backward bucket by bucket.
#include <gtest/gtest.h>

#include "tandem/model/sharded_parameters.h"

#include <regex>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#include "tandem/train/memory_preflight.h"
#include "tandem/train/plan.h"

namespace tandem {
namespace {

using testing::fixture;

std::int64_t logged(const std::string& output, const std::string& pattern) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex(pattern))) << pattern << "\n" << output;
  return m.empty() ? -1 : std::stoll(m[1]);
}

TEST(Plan, MatchesTheTrainersAccountingAndMeasuredBackendPeak) {
  const std::vector<std::pair<std::string, std::string>> runs = {{"none", "fp32"},
                                                                 {"selective", "fp32"},
                                                                 {"full", "fp32"},
                                                                 {"none", "bf16"},
                                                                 {"full", "bf16"}};
  for (const auto& [policy, precision] : runs) {
    SCOPED_TRACE(policy + " " + precision);
    auto p = testing::run_tandem("plan " + fixture("train/parity.yaml") +
                                 " --device cpu --json --recompute " + policy + " --precision " +
                                 precision);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const nlohmann::json plan = nlohmann::json::parse(p.output.substr(p.output.find('{')));
    const std::string dir = testing::temp_dir("plan_" + policy + "_" + precision);
    auto r = testing::run_tandem("train " + fixture("train/parity.yaml") +
                                 " trainer.save_folder=" + dir +
                                 " trainer.max_steps=1 evaluation.interval=0 "
                                 "trainer.peak_tflops=0.1 trainer.recompute=" +
                                 policy + " precision=" + precision);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json& mem = plan["memory"];
    EXPECT_EQ(mem["parameters"].get<double>(), logged(r.output, R"(parameters (\d+) B)"));
    EXPECT_EQ(mem["gradients"].get<double>(), logged(r.output, R"(gradients (\d+) B)"));
    EXPECT_EQ(mem["compute weights"].get<double>(),
              precision == "fp32" ? 0 : logged(r.output, R"(compute weights (\d+) B)"));
    EXPECT_EQ(mem["optimiser state"].get<double>(), logged(r.output, R"(Adam moments (\d+) B)"));
    EXPECT_EQ(mem["activations"].get<double>(), logged(r.output, R"(saved activations (\d+) B)"));
    EXPECT_EQ(plan["memory_backend"].get<double>(),
              logged(r.output, R"(after the first step: \d+ B \([\d.]+ MiB\) held, peak (\d+) B)"));
  }
}

train::PlanInput olmo3_7b(int world, dist::Strategy strategy, model::Recompute recompute) {
  train::PlanInput in =
      train::read_plan_input(std::string(TANDEM_SOURCE_DIR) + "/configs/olmo3-7b-stage1.yaml", {});
  in.world_size = world;
  in.device = train::device_spec("h200");
  in.dist.strategy = strategy;
  in.recompute = recompute;
  in.bf16 = true;
  return in;
}

double item(const train::Plan& p, const std::string& name) {
  for (const auto& m : p.memory)
    if (m.name == name) return m.bytes;
  ADD_FAILURE() << "no memory item " << name;
  return 0;
}

TEST(Plan, StrategiesAndRecomputeOnOlmo3_7B) {
  using dist::Strategy;
  using model::Recompute;
  const train::Plan ddp = train::make_plan(olmo3_7b(8, Strategy::kDdp, Recompute::kNone));
  const double n = static_cast<double>(ddp.input.model.total_params());
  EXPECT_GT(n, 7e9);
  // Replicated fp32 weights, gradients and two moments: 16 bytes per parameter (~117 GB), which
  // with activations cannot fit an H200.
  EXPECT_NEAR(item(ddp, "parameters") + item(ddp, "gradients") + item(ddp, "optimiser state"),
              16 * n, 0.001 * 16 * n);
  EXPECT_FALSE(ddp.fits);
  const train::Plan zero1 = train::make_plan(olmo3_7b(8, Strategy::kZero1, Recompute::kNone));
  EXPECT_NEAR(item(zero1, "optimiser state"), 8 * n / 8, 0.001 * n);
  EXPECT_EQ(item(zero1, "parameters"), item(ddp, "parameters"));
  const train::Plan fsdp = train::make_plan(olmo3_7b(64, Strategy::kFsdp, Recompute::kSelective));
  EXPECT_NEAR(item(fsdp, "parameters"), 4 * n / 64, 0.01 * 4 * n / 64);
  EXPECT_NEAR(item(fsdp, "optimiser state"), 8 * n / 64, 0.01 * 8 * n / 64);
  EXPECT_TRUE(fsdp.fits);
  EXPECT_LT(fsdp.total_bytes, 141e9);
  // Recompute: full < selective < none in activations, and costs executed FLOPs.
  const train::Plan none = train::make_plan(olmo3_7b(64, Strategy::kFsdp, Recompute::kNone));
  const train::Plan full = train::make_plan(olmo3_7b(64, Strategy::kFsdp, Recompute::kFull));
  EXPECT_LT(item(full, "activations"), item(fsdp, "activations"));
  EXPECT_LT(item(fsdp, "activations"), item(none, "activations"));
  EXPECT_GT(full.executed_flops_per_token, fsdp.executed_flops_per_token);
  EXPECT_GT(fsdp.executed_flops_per_token, none.executed_flops_per_token);
  EXPECT_EQ(none.executed_flops_per_token, none.model_flops_per_token);
  // Beside the project's MFU, OLMo-core's: the same throughput over OLMo-core's FLOP count.
  const std::int64_t T = fsdp.input.sequence_length;
  EXPECT_EQ(fsdp.olmo_core_flops_per_token,
            static_cast<double>(fsdp.input.model.olmo_core_flops_per_token(T)));
  EXPECT_LT(fsdp.olmo_core_flops_per_token, fsdp.model_flops_per_token);
  EXPECT_DOUBLE_EQ(fsdp.mfu_olmo_core,
                   fsdp.mfu * fsdp.olmo_core_flops_per_token / fsdp.model_flops_per_token);
  const nlohmann::json j = train::plan_to_json(fsdp);
  EXPECT_EQ(j["olmo_core_flops_per_token"].get<double>(), fsdp.olmo_core_flops_per_token);
  EXPECT_EQ(j["mfu_olmo_core"].get<double>(), fsdp.mfu_olmo_core);
  EXPECT_EQ(j["model_flops_per_token"].get<double>(), fsdp.model_flops_per_token);
  // FSDP's pools (dist/fsdp.h): the embedding/head buffer and two block buffers (prefetch), in
  // bf16 for the gathered weights and fp32 for the unit gradients.
  const model::ParameterLayout layout(fsdp.input.model);
  const auto units = model::parameter_units(layout);
  const double pool = static_cast<double>(std::max(units.front().size(), units.back().size()) +
                                          2 * units[1].size());
  EXPECT_EQ(item(fsdp, "compute weights"), 2 * pool);
  EXPECT_EQ(item(fsdp, "unit gradients"), 4 * pool);
}

// On the CUDA backend (--device h200) the kernel scratch follows the attention path the backend
// takes: cuDNN's deterministic SDPA backward for bf16 (dQ in fp32 and 2 bytes per query-key pair),
// tandem's kernels (a float of row sums per query row) for fp32 and under intra-document masking;
// where cuDNN's workspace would not fit at once, cuDNN's in the largest pieces (batch entries x kv
// heads) that fit, and tandem's kernels where not even one entry and kv head's would (each with a
// note). Each figure is cuBLASLt's 32 MiB plus the
// larger of that and the logits chunk (2674 rows of 100,352 bf16 logits, or 1337 in fp32, plus
// 16 bytes per token), worked out by hand for the 7B recipe (32 heads of 128, 8192 tokens, micro-
// batches of 2): 33,554,432 + 2 x 32 x 8192 x 128 x 4 + 2 x 32 x 8192^2 x 2 = 8,891,924,480 B with
// cuDNN; 33,554,432 + 536,682,496 + 16 x 16,384 = 570,499,072 B with the logits chunk.
TEST(Plan, CudaKernelScratchFollowsTheAttentionPath) {
  using dist::Strategy;
  using model::Recompute;
  train::PlanInput in = olmo3_7b(64, Strategy::kFsdp, Recompute::kFull);
  ASSERT_EQ(in.micro_batch_instances, 2);
  EXPECT_EQ(item(train::make_plan(in), "kernel scratch"), 8891924480.0);
  train::PlanInput documents = in;
  documents.intra_document = true;
  EXPECT_EQ(item(train::make_plan(documents), "kernel scratch"), 570499072.0);
  train::PlanInput fp32 = in;
  fp32.bf16 = false;
  EXPECT_EQ(item(train::make_plan(fp32), "kernel scratch"), 570499072.0);
  // 65,536 tokens in micro-batches of one: cuDNN would want 276 GB at once, so the backward runs
  // in the largest pieces that fit, 4 of 8 kv heads: 33,554,432 + 8 x 65,536 x 128 x 4 +
  // 8 x 65,536^2 x 2 B.
  train::PlanInput longer = in;
  longer.model.max_sequence_length = 65536;
  longer.sequence_length = 65536;
  longer.micro_batch_instances = 1;
  const train::Plan pieces = train::make_plan(longer);
  EXPECT_EQ(item(pieces, "kernel scratch"), 69021466624.0);
  EXPECT_EQ(pieces.attention_backward_pieces, 4);
  EXPECT_FALSE(pieces.attention_falls_back);
  ASSERT_FALSE(pieces.notes.empty());
  EXPECT_NE(pieces.notes.front().find("in 4 pieces of 1 batch entries x 8 kv heads"),
            std::string::npos)
      << pieces.notes.front();
  // A device 4 GB larger than the run needs with tandem's kernels: one kv head's workspace (8.6 GB,
  // 8 GB more than the logits chunk) does not fit, so the backend falls back to its kernels; the
  // logits chunk is larger than their row sums (8 MiB), so the scratch is 33,554,432 +
  // 536,682,496 + 16 x 65,536 B.
  train::PlanInput longest = longer;
  longest.device.memory_bytes =
      pieces.total_bytes - item(pieces, "kernel scratch") + 571285504.0 + 4e9;
  const train::Plan fallback = train::make_plan(longest);
  EXPECT_EQ(item(fallback, "kernel scratch"), 571285504.0);
  EXPECT_TRUE(fallback.fits);
  EXPECT_TRUE(fallback.attention_falls_back);
  EXPECT_EQ(fallback.attention_backward_pieces, 1);
  ASSERT_FALSE(fallback.notes.empty());
  EXPECT_NE(fallback.notes.front().find("falls back to tandem's attention kernels"),
            std::string::npos)
      << fallback.notes.front();
  // The long-context recipe's data section asks for document masking.
  EXPECT_TRUE(train::read_plan_input(
                  std::string(TANDEM_SOURCE_DIR) + "/configs/olmo3-7b-long-context.yaml", {})
                  .intra_document);
}

// The pieces the CUDA backend cuts cuDNN's attention backward into where its workspace has no room
// at once (and the planner with it): every shape of equal pieces of a [B, T, Hq, Hkv] problem, the
// whole first, then by size, more kv heads first among pieces of one size; a shape whose pieces'
// lse would start off 16 bytes is left out.
TEST(Plan, CudnnBackwardPiecesGoFromTheWholeDownToOneEntryAndKvHead) {
  auto shapes = [](std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t Hkv) {
    std::vector<std::pair<std::int64_t, std::int64_t>> got;
    for (const kernels::cuda::AttentionPiece& p :
         kernels::cuda::cudnn_backward_pieces(B, T, Hq, Hkv))
      got.emplace_back(p.batch, p.kv_heads);
    return got;
  };
  using Shapes = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(shapes(2, 64, 12, 6),
            (Shapes{{2, 6}, {1, 6}, {2, 3}, {2, 2}, {1, 3}, {1, 2}, {2, 1}, {1, 1}}));
  EXPECT_EQ(shapes(1, 8192, 1, 1), (Shapes{{1, 1}}));
  // T = 255: one query head's lse is 1020 bytes, so pieces of one batch entry (four query heads,
  // 4080 bytes) keep to 16 bytes and pieces of one kv head (two query heads, 2040 bytes) do not.
  EXPECT_EQ(shapes(2, 255, 4, 2), (Shapes{{2, 2}, {1, 2}}));
  EXPECT_EQ(shapes(3, 256, 4, 1).back(), std::make_pair(std::int64_t{1}, std::int64_t{1}));
}

// --device h100: the H200's Hopper node (peaks, links, reserve, backend) with 80 GB per GPU. The
// 7B recipe's per-rank bytes do not depend on the device where cuDNN's workspace fits both; ZeRO-1
// with selective recompute at 64 GPUs (about 115 GB) fits an H200 and not an H100.
TEST(Plan, H100IsTheH200NodeWith80GB) {
  using dist::Strategy;
  using model::Recompute;
  const train::DeviceSpec h200 = train::device_spec("h200"), h100 = train::device_spec("h100");
  EXPECT_EQ(h100.memory_bytes, 80e9);
  EXPECT_EQ(h200.memory_bytes, 141e9);
  EXPECT_EQ(h100.peak_flops_bf16, h200.peak_flops_bf16);
  EXPECT_EQ(h100.peak_flops_fp32, h200.peak_flops_fp32);
  EXPECT_EQ(h100.intra_node_bandwidth, h200.intra_node_bandwidth);
  EXPECT_EQ(h100.inter_node_bandwidth, h200.inter_node_bandwidth);
  EXPECT_EQ(h100.devices_per_node, h200.devices_per_node);
  EXPECT_EQ(h100.reserve_bytes, h200.reserve_bytes);
  EXPECT_EQ(h100.backend, "cuda");
  EXPECT_NE(h100.source.find("H100 SXM: 80 GB"), std::string::npos) << h100.source;
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    train::PlanInput on_h200 = olmo3_7b(64, Strategy::kZero1, r), on_h100 = on_h200;
    on_h100.device = h100;
    const train::Plan a = train::make_plan(on_h200), b = train::make_plan(on_h100);
    EXPECT_EQ(a.total_bytes, b.total_bytes);
    EXPECT_EQ(item(a, "kernel scratch"), item(b, "kernel scratch"));
    EXPECT_EQ(a.step_s, b.step_s);
    EXPECT_TRUE(a.fits);
    EXPECT_FALSE(b.fits) << b.total_bytes;
  }
}

// ddp and zero1 on a GPU backend sum the gradients in buckets, each started as the step's last
// backward completes it (dist/device_gradient_reduction.h); on the CPU backend after the backward.
// The expected figures come from the ring formula and the model's FLOP count, not from the
// planner's per-unit backward: over NVLink (8 GPUs) every bucket's sum ends while the backward
// runs but the last two, block 0's and the embedding's (a scatter, no matmul), which start as it
// ends (each unit of the 7B is a bucket of its own); over a 1 GB/s link the sums run back
// to back from the head's completion, so they outlast the backward by their total less the
// backward after the head (with full recompute: the executed FLOPs less one forward).
TEST(Plan, GradientSumsOnAGpuOverlapTheLastBackward) {
  using dist::Strategy;
  using model::Recompute;
  const train::PlanInput ddp_in = olmo3_7b(8, Strategy::kDdp, Recompute::kNone);
  const train::DeviceSpec& dev = ddp_in.device;
  const int W = 8;
  const auto units = model::parameter_units(model::ParameterLayout(ddp_in.model));
  const double embedding = static_cast<double>(units.front().size());
  const double block0 = static_cast<double>(units[1].size());
  const double total = static_cast<double>(units.back().end);
  auto ring = [&](double bytes, double bandwidth) {
    return bytes * (W - 1) / W / bandwidth + (W - 1) * dev.collective_step_latency;
  };
  const train::Plan ddp = train::make_plan(ddp_in);
  EXPECT_GT(ddp.gradient_buckets, ddp_in.model.n_layers);
  EXPECT_NEAR(ddp.exposed_comm_s,
              ring(2 * 4 * block0, dev.intra_node_bandwidth) +
                  ring(2 * 4 * embedding, dev.intra_node_bandwidth),
              1e-12);
  EXPECT_GT(ddp.comm_s, 10 * ddp.exposed_comm_s);
  EXPECT_EQ(ddp.step_s, ddp.compute_s + ddp.exposed_comm_s);

  // One bucket of everything: its sum waits for the whole backward.
  train::PlanInput one_bucket = ddp_in;
  one_bucket.dist.bucket_mb = 1e6;
  const train::Plan whole = train::make_plan(one_bucket);
  EXPECT_EQ(whole.gradient_buckets, 1);
  EXPECT_NEAR(whole.exposed_comm_s, whole.comm_s, 1e-12);  // (t + s) - t, rounded
  EXPECT_DOUBLE_EQ(whole.comm_bytes, ddp.comm_bytes);

  // The same traffic on the CPU backend, all of it after the backward.
  train::PlanInput cpu_in = ddp_in;
  cpu_in.device.backend = "cpu";
  const train::Plan on_cpu = train::make_plan(cpu_in);
  EXPECT_EQ(on_cpu.gradient_buckets, 0);
  EXPECT_EQ(on_cpu.exposed_comm_s, on_cpu.comm_s);
  EXPECT_DOUBLE_EQ(on_cpu.comm_bytes, ddp.comm_bytes);

  // ZeRO-1: the last two reduce-scatters, then the all-gather of the updated parameters.
  const train::Plan zero1 = train::make_plan(olmo3_7b(8, Strategy::kZero1, Recompute::kNone));
  EXPECT_NEAR(zero1.exposed_comm_s,
              ring(4 * block0, dev.intra_node_bandwidth) +
                  ring(4 * embedding, dev.intra_node_bandwidth) +
                  ring(4 * total, dev.intra_node_bandwidth),
              1e-12);

  // Links too slow to keep up: exposed = all sums - (backward - head's backward).
  for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
    train::PlanInput slow = olmo3_7b(8, Strategy::kDdp, r);
    slow.device.intra_node_bandwidth = 1e9;
    const train::Plan p = train::make_plan(slow);
    const double rate = dev.peak_flops_bf16 * slow.efficiency;
    const double tokens = static_cast<double>(p.micro_batch_tokens);
    const double backward =
        (p.executed_flops_per_token - p.model_flops_per_token / 3) * tokens / rate;
    const double head =
        2 * 2 * static_cast<double>(slow.model.d_model * slow.model.embedding_size) * tokens / rate;
    EXPECT_NEAR(p.exposed_comm_s, p.comm_s - (backward - head), 1e-9 * p.comm_s)
        << model::recompute_name(r);
    EXPECT_LT(p.exposed_comm_s, p.comm_s);
  }
}

// HSDP on a GPU: each unit's range of the gradient shard is summed across the replicas once the
// last backward has added it (dist/fsdp.h). With links that keep up, what is left after the
// backward is the sums of the units added at its end: blocks 0 and 1 (prefetch's two block
// buffers are taken again two blocks later), the head (its buffer taken by the embedding's
// backward, which has no matmul) and the embedding. The CPU backend sums the whole shard after.
TEST(Plan, HsdpReplicaSumsOnAGpuOverlapTheLastBackward) {
  using dist::Strategy;
  using model::Recompute;
  const int W = 64, S = 8, R = W / S;
  train::PlanInput gpu_in = olmo3_7b(W, Strategy::kHsdp, Recompute::kNone);
  gpu_in.dist.shard_group_size = S;
  ASSERT_TRUE(gpu_in.dist.prefetch);
  const train::DeviceSpec& dev = gpu_in.device;
  const auto units = model::parameter_units(model::ParameterLayout(gpu_in.model));
  auto range = [&](std::size_t u) { return std::ceil(static_cast<double>(units[u].size()) / S); };
  auto all_reduce = [&](double elements) {
    return 2 * 4 * elements * (R - 1) / R / dev.inter_node_bandwidth +
           (R - 1) * dev.collective_step_latency;
  };
  double shard = 0;
  for (std::size_t u = 0; u < units.size(); ++u) shard += range(u);

  const train::Plan gpu = train::make_plan(gpu_in);
  train::PlanInput cpu_in = gpu_in;
  cpu_in.device.backend = "cpu";
  const train::Plan cpu = train::make_plan(cpu_in);
  EXPECT_EQ(gpu.gradient_buckets, static_cast<int>(units.size()));
  EXPECT_EQ(cpu.gradient_buckets, 0);
  EXPECT_NEAR(gpu.comm_bytes, cpu.comm_bytes, 1e-12 * cpu.comm_bytes);
  const double tail = all_reduce(range(1)) + all_reduce(range(2)) +
                      all_reduce(range(units.size() - 1)) + all_reduce(range(0));
  const double cpu_others = cpu.exposed_comm_s - all_reduce(shard);
  EXPECT_NEAR(gpu.exposed_comm_s - cpu_others, tail, 1e-12);
  EXPECT_LT(gpu.step_s, cpu.step_s);
  EXPECT_NE(train::format_plan(gpu).find("replica sums in " + std::to_string(units.size()) +
                                         " unit ranges"),
            std::string::npos);

  // Without prefetch one block buffer: block 1 is added as block 0 takes it, so only block 0's
  // sum of the blocks is left after the backward (block 1's runs during block 0's backward).
  train::PlanInput no_prefetch = gpu_in;
  no_prefetch.dist.prefetch = false;
  train::PlanInput no_prefetch_cpu = no_prefetch;
  no_prefetch_cpu.device.backend = "cpu";
  const train::Plan one = train::make_plan(no_prefetch);
  const double one_others = train::make_plan(no_prefetch_cpu).exposed_comm_s - all_reduce(shard);
  EXPECT_NEAR(one.exposed_comm_s - one_others,
              all_reduce(range(1)) + all_reduce(range(units.size() - 1)) + all_reduce(range(0)),
              1e-12);
}

// The trainer's start-up check (train/memory_preflight.h) plans the run config it loaded; `tandem
// plan` reads the same file without opening its data. Both inputs give the same plan, on
// overrides that move every input the planner takes.
TEST(Plan, TheTrainersInputIsTheCommandsInput) {
  const std::string path = fixture("train/parity.yaml");
  const std::vector<std::vector<std::string>> variants = {
      {},
      {"trainer.recompute=full", "precision=bf16"},
      {"data.micro_batch_size=2", "data.generate_doc_lengths=true", "trainer.recompute=selective",
       "precision=bf16"},
      {"dist.strategy=fsdp", "data.micro_batch_size=0"},
      {"dist.strategy=zero1", "data.sequence_length=32"}};
  for (const std::vector<std::string>& overrides : variants)
    for (int world : {1, 2}) {
      std::string label;
      for (const std::string& o : overrides) label += o + " ";
      SCOPED_TRACE(label + "world " + std::to_string(world));
      train::PlanInput command = train::read_plan_input(path, overrides);
      command.world_size = world;
      command.device = train::device_spec("h200");
      const train::PlanInput trainer = train::plan_input_of(train::load_run_config(path, overrides),
                                                            world, train::device_spec("h200"));
      EXPECT_EQ(train::plan_to_json(train::make_plan(trainer)).dump(),
                train::plan_to_json(train::make_plan(command)).dump());
      EXPECT_EQ(trainer.bf16, label.find("bf16") != std::string::npos);
      EXPECT_EQ(trainer.intra_document, label.find("doc_lengths") != std::string::npos);
    }
}

TEST(Plan, ABatchThatDoesNotSplitNamesTheBatchThatWould) {
  try {
    train::make_plan(olmo3_7b(1024, dist::Strategy::kFsdp, model::Recompute::kFull));
    FAIL() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.global_batch_size=8388608"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train::device_spec("tpu"), core::Error);
}

TEST(Plan, TheTrainerRefusesAShardGroupThatDoesNotDivideTheWorld) {
  const std::string dir = testing::temp_dir("plan_hsdp");
  auto r =
      testing::run_tandem("train " + fixture("train/parity.yaml") + " trainer.save_folder=" + dir +
                          " trainer.max_steps=1 dist.strategy=hsdp dist.shard_group_size=2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("dist.shard_group_size 2 does not divide the world size 1"),
            std::string::npos)
      << r.output;
}

TEST(Plan, TextReportNamesEveryItemAndComparesTheAlternatives) {
  auto p = testing::run_tandem("plan " + std::string(TANDEM_SOURCE_DIR) +
                               "/configs/olmo3-7b-stage1.yaml --world-size 64 --strategy fsdp "
                               "--recompute selective --precision bf16");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (const char* text :
       {"parameters", "gradients", "optimiser state", "activations", "workspace", "compute weights",
        "unit gradients", "held by the backend", "fits of 141.00 GB", "tokens/s per device",
        "pool of gathered units", "alternatives at this world size", "zero1",
        "in OLMo-core's causal count", "in OLMo-core's count)"})
    EXPECT_NE(p.output.find(text), std::string::npos) << text << "\n" << p.output;
  auto bad = testing::run_tandem("plan " + fixture("train/parity.yaml") + " --device tpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("unknown device 'tpu'"), std::string::npos) << bad.output;
}

TEST(Plan, DistKeysOfShardedStrategiesAreChecked) {
  auto parse = [](const std::string& yaml) {
    return dist::read_dist_config(io::ConfigSection(YAML::Load(yaml), "dist", "run.yaml"));
  };
  const dist::DistConfig hsdp = parse("{strategy: hsdp, shard_group_size: 4}");
  EXPECT_EQ(hsdp.strategy, dist::Strategy::kHsdp);
  EXPECT_EQ(dist::shard_group_size(hsdp, 8), 4);
  EXPECT_EQ(dist::shard_group_size(parse("{strategy: fsdp}"), 8), 8);
  EXPECT_EQ(dist::shard_group_size(parse("{strategy: zero1}"), 8), 1);
  EXPECT_THROW(dist::shard_group_size(hsdp, 6), core::Error);  // 4 does not divide 6
  for (const char* bad :
       {"{strategy: hsdp}", "{strategy: fsdp, shard_group_size: 2}", "{strategy: zero3}"}) {
    try {
      parse(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dist"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem
