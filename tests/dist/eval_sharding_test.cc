// In-loop evaluation shared by the data-parallel ranks (eval/eval_ranks.h) under mpirun: held-out
// sets (chunked and AI2's padded ones) and downstream tasks give, bit for bit, one rank's numbers
// at every world size and strategy, a sharded model (FSDP, HSDP) included, whose ranks must make
// the same collective passes although their shares of the batches differ; `tandem eval` under
// mpirun likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "dist_test_util.h"
#ifdef TANDEM_HAVE_NCCL
#include "tandem/dist/nccl_communicator.h"
#endif

namespace tandem {
namespace {

using namespace dist_testing;

// A model with the evaluation fixtures' vocabulary (their tokenizer's 600 ids) trained for one
// step at learning rate 0, so that every run evaluates the same weights: the held-out sets and
// downstream tasks then see the same model whatever the world size did to the training sums.
// Batches are chosen so that the ranks' shares are uneven (the last round leaves ranks idle, the
// last batch of a set is smaller): the padded held-out sets in batches of 2, 11 sets of 5 to 40
// instances; the chunked ones in batches of 3. `padded_sets` (names under the fixtures' root)
// and `documents` (per task) make the evaluation smaller for the emulated CUDA backend, which takes
// about a second per downstream pass.
std::string write_config(const std::string& dir, const std::string& run,
                         const std::vector<std::string>& padded_sets = {}, int documents = 8) {
  const std::string sets =
      fixture("eval/padded_heldout/eval-data/perplexity/v3_small_dolma2-tokenizer");
  testing::write_text(dir + "/train.npy", std::string(12 * 64 * sizeof(std::uint32_t), '\0'));
  const std::string path = dir + "/" + run + ".yaml";
  std::string padded = "{root: " + sets + ", batch_instances: 2}";
  if (!padded_sets.empty()) {
    padded = "{batch_instances: 2, sets: [";
    for (const std::string& name : padded_sets)
      padded += fmt::format("{{label: {0}-validation, paths: [{1}/{0}/val/*.npy]}}, ", name, sets);
    padded += "]}";
  }
  testing::write_text(path,
                      fmt::format(R"(model: {{d_model: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2,
  hidden_size: 64, vocab_size: 600, max_sequence_length: 256,
  sliding_window: {{pattern: [16, 16, -1], force_full_attention_on_first_layer: false}}}}
data: {{paths: [{0}/train.npy], sequence_length: 64, global_batch_size: 768, micro_batch_size: 1,
  seed: 1, vocab_size: 600, dtype: uint32, eos_token_id: 500, pad_token_id: 511}}
optim: {{lr: 0.0}}
scheduler: {{name: constant}}
trainer: {{save_folder: {0}/{1}, max_steps: 1, progress: false}}
evaluation:
  batch_instances: 3
  sets: [{{name: pile, paths: [{2}/pile/val/*.npy]}}, {{name: ice, paths: [{2}/ice/val/*.npy]}}]
  padded: {5}
  downstream:
    tasks: [arc_easy:rc, piqa:bpb]
    limit: {6}
    tokenizer: {3}
    tasks_dir: {4}
    max_length: 256
    batch_tokens: 1024
)",
                                  dir, run, sets, fixture("eval/tokenizer.json"),
                                  fixture("eval/oe_eval_tasks"), padded, documents));
  return path;
}

// The evaluation metrics of the run's last metrics.jsonl record.
nlohmann::json evaluation_metrics(const std::string& run) {
  const auto records = read_metrics(run);
  EXPECT_FALSE(records.empty()) << run;
  nlohmann::json out = nlohmann::json::object();
  if (records.empty()) return out;
  for (const auto& [key, value] : records.back().items()) {
    if (key.rfind("eval/", 0) == 0 || key.rfind("downstream/", 0) == 0) out[key] = value;
  }
  return out;
}

// The number in "<what>: ... , N <unit>" of a log (-1 if absent).
std::int64_t logged_count(const std::string& output, const std::string& what,
                          const std::string& unit) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(what + R"(: [^\n]*?, (\d+) )" + unit))) return -1;
  return std::stoll(m[1]);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Rank 0's share of `all` batches dealt round-robin over `world` ranks from `lists` lists (one
// list: ceil(all / W) exactly; each further list may add one).
void expect_rank_0_share(std::int64_t here, std::int64_t all, int world, int lists,
                         const std::string& what) {
  EXPECT_GE(here, ceil_div(all, world)) << what;
  EXPECT_LE(here, ceil_div(all, world) + lists - 1) << what;
  EXPECT_LT(here, all) << what;
}

// "N <unit> shared by W ranks (K on rank 0)" after "<what>: " in a log: {N, K}, {-1, -1} if absent.
std::pair<std::int64_t, std::int64_t> logged_share(const std::string& output,
                                                   const std::string& what, const std::string& unit,
                                                   int world) {
  std::smatch m;
  const std::regex share(what + R"(: [^\n]*?, (\d+) )" + unit + " shared by " +
                         std::to_string(world) + R"( ranks \((\d+) on rank 0\))");
  if (!std::regex_search(output, m, share)) return {-1, -1};
  return {std::stoll(m[1]), std::stoll(m[2])};
}

// A run's downstream queries are cut to its 64-token sequences when max_length is not given (as
// OLMo-core's trainer cuts them), and piqa's 66-token continuation then cannot be scored: the run
// says so before its first step, not at its first evaluation.
TEST(EvalSharding, ADownstreamTaskTheRunCannotScoreStopsItBeforeTraining) {
  const std::string dir = temp_dir("eval_unfit");
  auto r = run_shell(tandem_command(
      1, "train " + write_config(dir, "w1") + " evaluation.downstream.max_length=0"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("task 'piqa:bpb'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("continuation of 66 tokens is longer than max_length 64"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("held-out evaluation"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/w1/metrics.jsonl")) << r.output;
}

TEST(EvalSharding, EveryWorldSizeAndStrategyEvaluatesAsOneRankBitForBit) {
  const std::string dir = temp_dir("eval_sharding");
  auto r = run_shell(tandem_command(1, "train " + write_config(dir, "w1")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::int64_t batches = logged_count(r.output, "held-out evaluation", "batches");
  const std::int64_t passes = logged_count(r.output, "downstream evaluation", "passes");
  ASSERT_GT(batches, 0) << r.output;
  ASSERT_GT(passes, 0) << r.output;
  const nlohmann::json one = evaluation_metrics(dir + "/w1");
  // 2 chunked sets and 11 padded ones (loss and perplexity), 2 tasks' metrics.
  for (const char* key :
       {"eval/pile/loss", "eval/ice/ppl", "eval/pile-validation/loss",
        "eval/m2d2_s2orc-validation/ppl", "downstream/arc_easy:rc/acc", "downstream/piqa:bpb/bpb"})
    ASSERT_TRUE(one.contains(key)) << key << "\n" << one.dump(1);
  int heldout = 0;
  for (const auto& [key, value] : one.items()) {
    if (key.rfind("eval/", 0) != 0) continue;
    ++heldout;
    EXPECT_TRUE(std::isfinite(value.get<double>()) && value.get<double>() > 0) << key;
  }
  EXPECT_EQ(heldout, 2 * 13);

  for (const auto& [world, strategy] : std::vector<std::pair<int, std::string>>{
           {2, "fsdp"}, {3, "ddp"}, {3, "fsdp"}, {4, "hsdp"}}) {
    const std::string what = fmt::format("{} W={}", strategy, world);
    const std::string run = fmt::format("w{}_{}", world, strategy);
    const std::string extra =
        " dist.strategy=" + strategy + (strategy == "hsdp" ? " dist.shard_group_size=2" : "");
    // A rank left waiting on a peer's collective (passes that do not match) ends the run soon.
    auto rr = run_shell("TANDEM_DIST_TIMEOUT_S=60 " +
                        tandem_command(world, "train " + write_config(dir, run) + extra));
    ASSERT_EQ(rr.exit_code, 0) << what << rr.output;
    // The same batches, rank 0 running its share: 0, W, 2W, ... of each list (held-out: the
    // chunked sets' and the padded sets'; downstream: one).
    const auto [heldout_all, heldout_here] =
        logged_share(rr.output, "held-out evaluation", "batches", world);
    EXPECT_EQ(heldout_all, batches) << what << rr.output;
    expect_rank_0_share(heldout_here, batches, world, 2, what);
    const auto [passes_all, passes_here] =
        logged_share(rr.output, "downstream evaluation", "passes", world);
    EXPECT_EQ(passes_all, passes) << what << rr.output;
    EXPECT_EQ(passes_here, ceil_div(passes, world)) << what;
    const nlohmann::json many = evaluation_metrics(dir + "/" + run);
    ASSERT_EQ(many.size(), one.size()) << what;
    for (const auto& [key, value] : one.items()) {
      // Bit for bit: JSON keeps every double's 17 digits.
      EXPECT_EQ(many.at(key).get<double>(), value.get<double>()) << what << " " << key;
    }
  }
}

// `tandem eval` under mpirun: the JSON (but for timings and the predictions path) and the
// predictions file of 3 ranks are one process's, byte for byte.
TEST(EvalSharding, TandemEvalOnThreeRanksPrintsAndWritesWhatOneProcessDoes) {
  const std::string dir = temp_dir("eval_sharding_cli");
  const std::string config = write_config(dir, "run");
  auto r = run_shell(tandem_command(1, "train " + config));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto evaluate = [&](int world) {
    const std::string predictions = fmt::format("{}/predictions-w{}.jsonl", dir, world);
    auto e = run_shell(tandem_command(world, fmt::format("eval {} --checkpoint {}/run --json "
                                                         "--predictions {}",
                                                         config, dir, predictions)));
    EXPECT_EQ(e.exit_code, 0) << e.output;
    nlohmann::json j = nlohmann::json::parse(e.output.substr(e.output.find('{')));
    EXPECT_EQ(j.at("predictions"), predictions);
    EXPECT_EQ(j.at("ranks"), world);
    const std::int64_t batches = j.at("batches").get<std::int64_t>();
    EXPECT_GT(batches, 0);
    if (world == 1)
      EXPECT_EQ(j.at("batches_on_rank_0").get<std::int64_t>(), batches);
    else  // three lists: the chunked sets', the padded sets', the tasks'
      expect_rank_0_share(j.at("batches_on_rank_0").get<std::int64_t>(), batches, world, 3,
                          "tandem eval");
    for (const char* key : {"predictions", "ranks", "batches_on_rank_0"}) j.erase(key);
    for (auto& [task, result] : j.at("downstream").items()) result.erase("seconds");
    return std::make_pair(j, testing::read_text(predictions));
  };
  const auto [one, one_predictions] = evaluate(1);
  ASSERT_EQ(one.at("heldout").size(), 13u) << one.dump(1);
  ASSERT_EQ(one.at("downstream").size(), 2u) << one.dump(1);
  const auto [three, three_predictions] = evaluate(3);
  EXPECT_EQ(three, one);
  EXPECT_FALSE(one_predictions.empty());
  EXPECT_EQ(three_predictions, one_predictions);
}

#ifdef TANDEM_HAVE_NCCL

// The CUDA backend with NCCL under FSDP: its one-token padding passes and its gathers from device
// memory keep the two ranks in step, and they evaluate as one rank on the same backend does. On
// four padded sets in batches of 2 and the two chunked sets (13 batches), and 2 documents per
// task (3 downstream passes): both lists leave rank 1 a padding pass. In bf16, as the recipes
// run: the units are gathered as bf16 compute weights (in fp32 the emulator's plain attention
// kernels made this CI's longest test, for nothing the sharding depends on).
TEST(EvalSharding, CudaBackendUnderFsdpWithNcclEvaluatesAsOneRank) {
  std::string why;
  const int devices = dist::cuda_device_count(&why);
  if (devices < 2)
    GTEST_SKIP() << "2 ranks need 2 CUDA devices (NCCL refuses two ranks on one), this machine has "
                 << devices << (devices == 0 ? " (" + why + ")" : "");
  const std::string dir = temp_dir("eval_sharding_cuda");
  const std::vector<std::string> padded = {"c4_en", "ice", "pile", "wikitext_103"};
  // One training instance per rank: the step only has to leave the same weights everywhere.
  const std::string cuda = " backend=cuda precision=bf16 data.global_batch_size=128";
  auto r = run_shell(tandem_command(1, "train " + write_config(dir, "w1", padded, 2) + cuda));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::int64_t batches = logged_count(r.output, "held-out evaluation", "batches");
  const std::int64_t passes = logged_count(r.output, "downstream evaluation", "passes");
  const nlohmann::json one = evaluation_metrics(dir + "/w1");
  ASSERT_EQ(one.size(), 2 * (2 + padded.size()) + 9) << one.dump(1);  // loss, ppl; 9 of the tasks
  auto rr = run_shell("TANDEM_DIST_TIMEOUT_S=120 TANDEM_COMMUNICATOR=nccl " +
                      tandem_command(2, "train " + write_config(dir, "w2", padded, 2) + cuda +
                                            " dist.strategy=fsdp"));
  ASSERT_EQ(rr.exit_code, 0) << rr.output;
  // Uneven shares: rank 1 makes padding passes in both lists.
  const auto [heldout_all, heldout_here] =
      logged_share(rr.output, "held-out evaluation", "batches", 2);
  EXPECT_EQ(heldout_all, batches) << rr.output;
  EXPECT_GT(2 * heldout_here, batches) << rr.output;
  const auto [passes_all, passes_here] =
      logged_share(rr.output, "downstream evaluation", "passes", 2);
  EXPECT_EQ(passes_all, passes) << rr.output;
  EXPECT_GT(2 * passes_here, passes) << rr.output;
  const nlohmann::json two = evaluation_metrics(dir + "/w2");
  ASSERT_EQ(two.size(), one.size());
  for (const auto& [key, value] : one.items())
    EXPECT_EQ(two.at(key).get<double>(), value.get<double>()) << key;
}

#endif

}  // namespace
}  // namespace tandem
