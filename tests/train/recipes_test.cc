// The shipped OLMo 3 7B recipes: their model sections are AI2's 7B; stage 1's stitched schedule
// switches where the released run did (step 596,047, the checkpoint part 2 loaded) and joins the
// first cosine at its midpoint; AI2's exact values (stage-2 lr, chunks of 8192, micro-batches of
// 2 instances); their data comes from an OLMo-core data-mix manifest in OLMo-core's order; and
// they list AI2's in-loop downstream suite and padded held-out sets.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/data/data_config.h"
#include "tandem/data/loader.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/inloop_tasks.h"
#include "tandem/io/config.h"
#include "tandem/model/model_config.h"
#include "tandem/optim/schedule.h"

namespace tandem {
namespace {

std::string recipe(const std::string& name) {
  return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name;
}

TEST(Recipes, Olmo3SevenBStageOneSchedule) {
  YAML::Node root = io::load_yaml_config(recipe("olmo3-7b-stage1.yaml"));
  model::ModelConfig m = model::parse_model_config(io::ConfigSection(root["model"], "model"));
  EXPECT_EQ(m.embedding_size, 100352);
  auto s = optim::make_schedule(io::ConfigSection(root["scheduler"], "scheduler"));
  const std::int64_t t_max = root["trainer"]["max_steps"].as<std::int64_t>();
  EXPECT_EQ(t_max, 1413814);
  const double lr = root["optim"]["lr"].as<double>();
  EXPECT_NEAR(s->lr(lr, 2000, t_max), lr, 1e-12);  // end of warmup
  // The switch: the cosine through step 596,047, the half-cosine's warmup after it (0.38 % below
  // the cosine at first), meeting the cosine's midpoint, 0.55 lr, at 597,046.
  EXPECT_EQ(root["scheduler"]["switch_step"].as<std::int64_t>(), 596047);
  const double before = s->lr(lr, 596047, t_max), after = s->lr(lr, 596048, t_max);
  EXPECT_NEAR(before, 0.55 * lr, 0.01 * lr);
  EXPECT_NEAR((after - before) / before, -0.0038, 1e-4);
  EXPECT_NEAR(s->lr(lr, 597046, t_max), 0.55 * lr, 1e-12 * lr);
  // The half-cosine keeps falling toward 0.1 lr at its 7T horizon, not reached when data ran out.
  double end = s->lr(lr, t_max, t_max);
  EXPECT_LT(end, before);
  EXPECT_GT(end, 0.1 * lr);
}

TEST(Recipes, Olmo3SevenBStageTwoAnneal) {
  YAML::Node root = io::load_yaml_config(recipe("olmo3-7b-stage2.yaml"));
  auto s = optim::make_schedule(io::ConfigSection(root["scheduler"], "scheduler"));
  const std::int64_t t_max = root["trainer"]["max_steps"].as<std::int64_t>();
  const double lr = root["optim"]["lr"].as<double>();
  EXPECT_EQ(lr, 2.0712352850360292e-4);             // OLMo-3-1025-7B-midtrain.py's LR, not rounded
  EXPECT_NEAR(s->lr(lr, 1, t_max), lr, 1e-3 * lr);  // no warmup
  EXPECT_NEAR(s->lr(lr, t_max / 2, t_max), lr / 2, 1e-3 * lr);
  EXPECT_NEAR(s->lr(lr, t_max, t_max), 0.0, 1e-12);
  EXPECT_TRUE(root["trainer"]["load_optimizer_state"].as<bool>());
}

TEST(Recipes, Olmo3SevenBRunsInBf16AsAi2Did) {
  for (const char* name :
       {"olmo3-7b-stage1.yaml", "olmo3-7b-stage2.yaml", "olmo3-7b-long-context.yaml"}) {
    YAML::Node root = io::load_yaml_config(recipe(name));
    EXPECT_EQ(root["precision"].as<std::string>(), "bf16") << name;
  }
}

TEST(Recipes, Olmo3SevenBListsAi2sInLoopSuite) {
  for (const char* name : {"olmo3-7b-stage1.yaml", "olmo3-7b-stage2.yaml"}) {
    YAML::Node root = io::load_yaml_config(recipe(name));
    auto d = eval::parse_downstream_config(
        io::ConfigSection(root["evaluation"]["downstream"], "evaluation.downstream"));
    std::vector<std::string> labels;
    for (const auto& t : d.tasks) labels.push_back(t.name);
    EXPECT_EQ(labels, eval::olmo3_7b_inloop_suite()) << name;
    EXPECT_EQ(d.options.max_length, 8192) << name;
    const YAML::Node padded = root["evaluation"]["padded"];
    EXPECT_EQ(padded["sequence_length"].as<std::int64_t>(), 8192) << name;
    EXPECT_EQ(padded["mix"].as<std::string>(), "data/mixes/v3-small-ppl-validation.txt") << name;
    EXPECT_EQ(padded["mix_tokenizer_id"].as<std::string>(), "dolma2-tokenizer") << name;
  }
}

// Both recipes chunk by 8192 and split each rank's batch into micro-batches of 2 instances, as
// AI2's scripts did (max_target_sequence_length 8192, rank_microbatch_size 2 * 8192).
TEST(Recipes, Olmo3SevenBDataValuesAreAi2s) {
  for (const char* name : {"olmo3-7b-stage1.yaml", "olmo3-7b-stage2.yaml"}) {
    YAML::Node root = io::load_yaml_config(recipe(name));
    const YAML::Node data = root["data"];
    EXPECT_EQ(data["max_target_sequence_length"].as<std::int64_t>(), 8192) << name;
    EXPECT_EQ(data["micro_batch_size"].as<std::int64_t>(), 2) << name;
    EXPECT_EQ(data["sequence_length"].as<std::int64_t>(), 8192) << name;
    EXPECT_TRUE(data["mix"].IsDefined()) << name;
    EXPECT_EQ(data["mix_tokenizer_id"].as<std::string>(), "allenai/dolma3-tokenizer") << name;
  }
}

// The stage-1 recipe's data section, pointed at the small sample manifest shipped for tests
// (tests/fixtures/data/mix/) with a sequence length that fits it, gives OLMo-core's global order
// for that manifest (loader_mix.json: OLMo-core's DataMix.build + NumpyFSLDataset + loader).
TEST(Recipes, Olmo3SevenBDataComesFromAManifestInOlmoCoreOrder) {
  const std::string fx = std::string(TANDEM_FIXTURES_DIR) + "/data/";
  const auto ref = nlohmann::json::parse(core::read_file(fx + "loader_mix.json"));
  const std::string path = recipe("olmo3-7b-stage1.yaml");
  data::DataConfig config = data::load_data_config(
      path, {"data.mix=" + fx + ref["manifest"].get<std::string>(),
             "data.mix_base_dir=" + fx + ref["mix_base_dir"].get<std::string>(),
             "data.sequence_length=" + std::to_string(ref["sequence_length"].get<int>()),
             "data.max_target_sequence_length=" +
                 std::to_string(ref["max_target_sequence_length"].get<int>()),
             "data.global_batch_size=" + std::to_string(ref["global_batch_size"].get<int>())});
  ASSERT_EQ(config.seed, 34521);  // stage 1's seed, the fixture's
  data::Loader loader(config);
  const nlohmann::json* epoch1 = nullptr;
  for (const auto& r : ref["runs"])
    if (r["world_size"] == 1 && r["epoch"] == 1) epoch1 = &r;
  ASSERT_NE(epoch1, nullptr);
  auto order = loader.plan(1)->global_order();
  EXPECT_EQ(std::vector<std::uint32_t>(order.begin(), order.end()),
            (*epoch1)["global_indices"].get<std::vector<std::uint32_t>>());
}

// AI2's long-context extension: 65,536 tokens, YaRN on the full layers (model/released_config_test
// checks it is the released model), intra-document masking, LinearWithWarmup(200, alpha_f 0).
TEST(Recipes, Olmo3SevenBLongContext) {
  YAML::Node root = io::load_yaml_config(recipe("olmo3-7b-long-context.yaml"));
  model::ModelConfig m = model::parse_model_config(io::ConfigSection(root["model"], "model"));
  EXPECT_EQ(m.max_sequence_length, 65536);
  EXPECT_EQ(m.full_attention_rope.type, "yarn");
  EXPECT_EQ(m.sliding_attention_rope.type, "default");
  EXPECT_EQ(root["data"]["sequence_length"].as<std::int64_t>(), 65536);
  EXPECT_EQ(root["data"]["global_batch_size"].as<std::int64_t>(), 65536 * 64);
  EXPECT_TRUE(root["data"]["generate_doc_lengths"].as<bool>());
  const double lr = root["optim"]["lr"].as<double>();
  EXPECT_EQ(lr, 2.0712352850360292e-4);
  auto s = optim::make_schedule(io::ConfigSection(root["scheduler"], "scheduler"));
  const std::int64_t t_max = root["trainer"]["max_steps"].as<std::int64_t>();
  EXPECT_NEAR(t_max * 4194304.0, 50e9, 4194304.0);  // 50B tokens
  EXPECT_NEAR(s->lr(lr, 100, t_max), lr / 2, 1e-12);
  EXPECT_NEAR(s->lr(lr, 200, t_max), lr, 1e-12);
  EXPECT_NEAR(s->lr(lr, t_max, t_max), 0.0, 1e-12);
  EXPECT_TRUE(root["trainer"]["load_optimizer_state"].as<bool>());
}

// Its data as AI2 read it (NumpyPackedFSLDatasetConfig, source_group_size 8, permutation seed
// 123), pointed at the packed fixtures' uint32 files: they are packed, whole documents per
// instance.
TEST(Recipes, Olmo3SevenBLongContextPacksDocumentsAsAi2Did) {
  const std::string fx = std::string(TANDEM_FIXTURES_DIR) + "/data/packed/tokens_p32/";
  const std::string work = tandem::testing::temp_dir("recipes_long_context_work");
  data::DataConfig config = data::load_data_config(
      recipe("olmo3-7b-long-context.yaml"),
      {"data.paths=[\"" + fx + "part-*-00000.npy\"]", "data.work_dir=" + work});
  ASSERT_TRUE(config.packing.has_value());
  EXPECT_EQ(config.packing->source_group_size, 8);
  EXPECT_EQ(config.packing->long_doc_strategy, data::LongDocStrategy::kTruncate);
  EXPECT_EQ(config.source_permutation_seed, 123);
  EXPECT_TRUE(config.generate_doc_lengths);
  const data::TokenDataset dataset(config);
  ASSERT_TRUE(dataset.packed());
  ASSERT_EQ(dataset.num_instances(), 1u);  // 4 small files, one group: one 65,536-token instance
  std::int64_t tokens = 0;
  for (std::int64_t len : dataset.document_lengths(0)) tokens += len;
  EXPECT_GT(tokens, 10000);
  EXPECT_LE(tokens, 65536);
}

}  // namespace
}  // namespace tandem
