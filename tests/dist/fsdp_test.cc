// FSDP and HSDP (dist.strategy fsdp/hsdp) under mpirun: the same per-step losses as the
// replicated run on the same batches (1e-5 relative), 1/W of the parameters, gradients and
// moments per rank, sharded checkpoints (weights and moments) that resume at any world size and
// strategy, bf16, micro-batches and recompute combined with sharding.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "dist_test_util.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using namespace dist_testing;

// The run's per-rank "parameters N B" from the memory line.
std::int64_t logged_parameter_bytes(const std::string& output) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex(R"(parameters (\d+) B)"))) << output;
  return m.empty() ? 0 : std::stoll(m[1]);
}

// `tandem train` of the fixture recipe for `steps` on `world` ranks into `run`, with `extra`
// overrides: the command's output; the test fails when it does not succeed.
std::string train_ok(int world, const std::string& run, int steps, const std::string& extra) {
  const auto r = run_shell(tandem_command(world, "train " + train_args(run, steps) + extra));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

std::string strategy(int world, const std::string& s) {
  if (s == "hsdp") return " dist.strategy=hsdp dist.shard_group_size=2";
  return " dist.strategy=" + s + (world == 8 ? " data.micro_batch_size=1" : "");
}

TEST(Fsdp, MatchesReplicatedAtW124AndHsdp2x2For50Steps) {
  const int steps = 50;
  const std::string ddp = temp_dir("fsdp_ddp_w1");
  auto r = run_shell(tandem_command(1, "train " + train_args(ddp, steps)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::int64_t whole = logged_parameter_bytes(r.output);
  const auto reference = read_metrics(ddp);
  ASSERT_EQ(reference.size(), static_cast<std::size_t>(steps));

  for (const auto& [world, s] : std::vector<std::pair<int, std::string>>{
           {1, "fsdp"}, {2, "fsdp"}, {4, "fsdp"}, {4, "hsdp"}}) {
    const std::string what = fmt::format("{} W={}", s, world);
    const std::string run = temp_dir(fmt::format("fsdp_{}_w{}", s, world));
    auto rr =
        run_shell(tandem_command(world, "train " + train_args(run, steps) + strategy(world, s)));
    ASSERT_EQ(rr.exit_code, 0) << what << rr.output;
    expect_close_losses(reference, read_metrics(run), 0, what);
    // Each rank holds 1/shard-group of every unit (the layout's gaps between units excluded).
    const int group = s == "hsdp" ? 2 : world;
    const std::int64_t mine = logged_parameter_bytes(rr.output);
    EXPECT_LE(mine, whole / group + 4 * 16 * 8) << what;
    EXPECT_GE(mine, whole / group - 4 * 16 * 8) << what;
    if (world > 1) {
      EXPECT_NE(rr.output.find("prefetch on"), std::string::npos) << what << rr.output;
      EXPECT_NE(rr.output.find("unit collectives"), std::string::npos) << what << rr.output;
    }
  }
}

TEST(Fsdp, CheckpointsReshardAcrossWorldSizesAndStrategies) {
  const int steps = 20, at = 10;
  const std::string straight = temp_dir("fsdp_elastic_w4");
  auto r = run_shell(tandem_command(4, "train " + train_args(straight, steps) +
                                           " dist.strategy=fsdp trainer.save_interval=10"
                                           " trainer.keep_last=5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = read_metrics(straight);
  const std::string ckpt = "checkpoints/step-0000" + std::to_string(at);
  // Each rank wrote its weights and its moments; nobody wrote the whole model.
  for (const char* part : {"model", "optim"})
    for (int s = 0; s < 4; ++s)
      EXPECT_TRUE(fs::exists(straight + "/" + ckpt + "/" + part +
                             fmt::format("/shard-{:05d}-of-00004.safetensors", s)))
          << part << " " << s;
  EXPECT_FALSE(fs::exists(straight + "/" + ckpt + "/model/model.safetensors"));
  EXPECT_EQ(read_json(straight + "/" + ckpt + "/model/shards.json")["num_shards"], 4);

  for (const auto& [world, s] :
       std::vector<std::pair<int, std::string>>{{1, "ddp"}, {4, "hsdp"}, {8, "fsdp"}}) {
    const std::string what = fmt::format("fsdp W=4 -> {} W={}", s, world);
    const std::string run = temp_dir(fmt::format("fsdp_elastic_{}_w{}", s, world));
    fs::create_directories(run + "/checkpoints");
    fs::copy(straight + "/" + ckpt, run + "/" + ckpt, fs::copy_options::recursive);
    fs::copy_file(straight + "/metrics.jsonl", run + "/metrics.jsonl");
    auto rr =
        run_shell(tandem_command(world, "train " + train_args(run, steps) + strategy(world, s)));
    ASSERT_EQ(rr.exit_code, 0) << what << rr.output;
    EXPECT_NE(rr.output.find("resumed from"), std::string::npos) << what << rr.output;
    expect_close_losses(reference, read_metrics(run), at, what);
    const std::string last = "/checkpoints/step-0000" + std::to_string(steps) + "/state.json";
    EXPECT_EQ(read_json(straight + last)["loader"], read_json(run + last)["loader"]) << what;
  }

  // A replicated checkpoint resumes sharded too (FSDP W=2 reads ranges of model.safetensors).
  const std::string replicated = temp_dir("fsdp_elastic_ddp_w1");
  r = run_shell(tandem_command(1, "train " + train_args(replicated, steps) +
                                      " trainer.save_interval=10 trainer.keep_last=5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = temp_dir("fsdp_elastic_from_ddp_w2");
  fs::create_directories(run + "/checkpoints");
  fs::copy(replicated + "/" + ckpt, run + "/" + ckpt, fs::copy_options::recursive);
  fs::copy_file(replicated + "/metrics.jsonl", run + "/metrics.jsonl");
  auto rr = run_shell(tandem_command(2, "train " + train_args(run, steps) + strategy(2, "fsdp")));
  ASSERT_EQ(rr.exit_code, 0) << rr.output;
  expect_close_losses(read_metrics(replicated), read_metrics(run), at, "ddp W=1 -> fsdp W=2");

  // An HSDP 2x2 checkpoint (the first group's 2 shards; the replicas write none) resumes as
  // FSDP W=2.
  const std::string hybrid = temp_dir("fsdp_elastic_hsdp_w4");
  r = run_shell(tandem_command(4, "train " + train_args(hybrid, steps) + strategy(4, "hsdp") +
                                      " trainer.save_interval=10 trainer.keep_last=5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_json(hybrid + "/" + ckpt + "/model/shards.json")["num_shards"], 2);
  EXPECT_EQ(read_json(hybrid + "/" + ckpt + "/optim/index.json")["num_shards"], 2);
  const std::string from_hybrid = temp_dir("fsdp_elastic_from_hsdp_w2");
  fs::create_directories(from_hybrid + "/checkpoints");
  fs::copy(hybrid + "/" + ckpt, from_hybrid + "/" + ckpt, fs::copy_options::recursive);
  fs::copy_file(hybrid + "/metrics.jsonl", from_hybrid + "/metrics.jsonl");
  rr =
      run_shell(tandem_command(2, "train " + train_args(from_hybrid, steps) + strategy(2, "fsdp")));
  ASSERT_EQ(rr.exit_code, 0) << rr.output;
  expect_close_losses(read_metrics(hybrid), read_metrics(from_hybrid), at, "hsdp 2x2 -> fsdp W=2");

  // The data audit: same global batches at every world size, each instance once.
  auto audit =
      run_shell(std::string(TANDEM_BINARY) + " data audit " + fixture("train/parity.yaml") +
                " --world-sizes 1,2,4,8 --resume-at '10:4>1' --resume-at '10:4>8'"
                " --resume-at '10:1>2' --no-duplicates");
  EXPECT_EQ(audit.exit_code, 0) << audit.output;
  for (const char* resume :
       {"from world size 4 to 1", "from world size 4 to 8", "from world size 1 to 2"})
    EXPECT_NE(audit.output.find(std::string("resume at step 10 ") + resume), std::string::npos)
        << resume << "\n"
        << audit.output;

  // The sharded model is readable whole: converted to HF like any tandem model directory.
  const std::string hf = temp_dir("fsdp_elastic_hf");
  auto conv = run_shell(std::string(TANDEM_BINARY) + " convert --from tandem " + straight + "/" +
                        ckpt + "/model --to hf " + hf + "/out");
  EXPECT_EQ(conv.exit_code, 0) << conv.output;
  EXPECT_TRUE(fs::exists(hf + "/out/model.safetensors"));
}

TEST(Fsdp, Bf16MicroBatchesRecomputeAndNoPrefetchMatchReplicated) {
  const int steps = 20;
  // bf16 with full recompute, W=2: the gathered bf16 units are the bits the replicated model casts.
  // One micro-batch per rank: FSDP then sums the gradients in the replicated run's order
  // (with several, it sums each micro-batch over the ranks and then the micro-batches, a
  // different rounding; bf16 turns such last-bit differences of the masters into bf16 rounding
  // flips, which grow over steps: the micro-batch case is checked in fp32 below).
  const std::string bf16 = " precision=bf16 trainer.recompute=full data.micro_batch_size=4";
  const std::string ddp = temp_dir("fsdp_bf16_ddp");
  train_ok(2, ddp, steps, bf16);
  const std::string fsdp = temp_dir("fsdp_bf16_fsdp");
  const std::string out = train_ok(2, fsdp, steps, bf16 + strategy(2, "fsdp"));
  EXPECT_NE(out.find("gathered unit weights"), std::string::npos) << out;
  expect_close_losses(read_metrics(ddp), read_metrics(fsdp), 0, "bf16 full recompute, fsdp W=2");

  // Four micro-batches per rank, selective recompute, no prefetch (collectives on the training
  // thread), with held-out evaluation during training (every rank takes part in its gathers).
  const std::string micro = " data.micro_batch_size=1 trainer.recompute=selective";
  const std::string eval = " evaluation.interval=10";
  const std::string plain = temp_dir("fsdp_micro_ddp");
  train_ok(1, plain, steps, micro + eval);
  const std::string sharded = temp_dir("fsdp_micro_fsdp");
  const std::string no_prefetch =
      train_ok(2, sharded, steps, micro + eval + " dist.strategy=fsdp dist.prefetch=false");
  EXPECT_NE(no_prefetch.find("prefetch off (dist.prefetch false)"), std::string::npos)
      << no_prefetch;
  const auto a = read_metrics(plain), b = read_metrics(sharded);
  expect_close_losses(a, b, 0, "micro-batches + selective recompute, fsdp W=2 without prefetch");
  for (std::size_t i : {9u, 19u}) {
    ASSERT_TRUE(a[i].contains("eval/heldout/loss") && b[i].contains("eval/heldout/loss")) << i;
    const double x = a[i]["eval/heldout/loss"], y = b[i]["eval/heldout/loss"];
    EXPECT_LE(std::abs(x - y), 1e-5 * std::abs(x)) << "held-out loss at step " << i + 1;
  }
}

// From an HF release whose embedding keeps only the tokenizer's rows (the fixture's 512, padded to
// the config's 640): each rank reads only its ranges (the embedding unit's second half crosses
// into the padding at W=2), and the run is the replicated run from the same directory.
TEST(Fsdp, StartsFromAnHfReleasePaddedToTheConfigsEmbedding) {
  const int steps = 3;
  const std::string pad = " model.pad_vocab_to_multiple_of=640";
  const std::string plain = temp_dir("fsdp_hf_padded_w1");
  train_ok(1, plain, steps, pad);
  const std::string sharded = temp_dir("fsdp_hf_padded_w2");
  train_ok(2, sharded, steps, pad + strategy(2, "fsdp"));
  expect_close_losses(read_metrics(plain), read_metrics(sharded), 0, "fsdp W=2 from padded HF");
}

}  // namespace
}  // namespace tandem
