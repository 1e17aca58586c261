// The released OLMo 3 7B and 32B config.json (reconstructed; docs/formats.md): tandem reads them as
// transformers does (YaRN on the full-attention layers only, plain RoPE on the sliding ones, the
// released layer types, 65536 positions, the RoPE frequencies transformers builds at head_dim 128),
// writes them back to a config that reads the same, and tandem's long-context recipe (OLMo-core's
// with_rope_scaling) is the same model function. Parity of the released RoPE scaling on a small
// model: hf_config_test.cc (released_yarn). Fixtures: tools/make_hf_config_fixtures.py.
#include <gtest/gtest.h>

#include <cstring>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/model/hf_config.h"
#include "tandem/model/model_io.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// Every frequency within one ulp, the same attention factor.
void expect_same_rope(const model::RopeConfig& a, const model::RopeConfig& b,
                      std::int64_t head_dim) {
  const auto fa = model::rope_frequencies(a, head_dim), fb = model::rope_frequencies(b, head_dim);
  ASSERT_EQ(fa.inv_freq.size(), fb.inv_freq.size());
  for (std::size_t i = 0; i < fa.inv_freq.size(); ++i)
    EXPECT_LE(tandem::testing::ulps(fa.inv_freq[i], fb.inv_freq[i]), 1) << i;
  EXPECT_DOUBLE_EQ(fa.attention_factor, fb.attention_factor);
}

class Released : public ::testing::TestWithParam<const char*> {};

TEST_P(Released, ReadsAsTransformersAndWritesBack) {
  const std::string base = testing::fixture(std::string("model/released/") + GetParam());
  const json hf = json::parse(core::read_file(base + "-config.json"));
  const json ref = json::parse(core::read_file(base + "-resolved.json"));
  const model::ModelConfig c = model::model_config_from_hf(hf, base);
  EXPECT_EQ(c.max_sequence_length, 65536);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const bool full = ref["layer_types"][l] == "full_attention";
    EXPECT_EQ(c.layer_windows[l], full ? 0 : 4096) << l;
    EXPECT_EQ(full, l % 4 == 3) << l;
  }
  for (const auto& [type, r] : ref["rope"].items()) {
    const model::RopeConfig& ours =
        type == "full_attention" ? c.full_attention_rope : c.sliding_attention_rope;
    EXPECT_EQ(ours.type, r["rope_type"].get<std::string>());
    const auto f = model::rope_frequencies(ours, c.head_dim);
    const auto inv_freq = r["inv_freq"].get<std::vector<float>>();
    ASSERT_EQ(f.inv_freq.size(), inv_freq.size());
    for (std::size_t i = 0; i < inv_freq.size(); ++i)
      EXPECT_LE(tandem::testing::ulps(f.inv_freq[i], inv_freq[i]), 1) << type << " " << i;
    EXPECT_EQ(f.attention_factor, r["attention_scaling"].get<double>()) << type;
  }
  const model::ModelConfig back =
      model::model_config_from_hf(model::model_config_to_hf(c, "bfloat16"), "export");
  EXPECT_EQ(back.layer_windows, c.layer_windows);
  EXPECT_EQ(back.full_attention_rope, c.full_attention_rope);
  EXPECT_EQ(back.sliding_attention_rope, c.sliding_attention_rope);
  EXPECT_EQ(back.max_sequence_length, c.max_sequence_length);
}

INSTANTIATE_TEST_SUITE_P(Olmo3, Released, ::testing::Values("olmo3-7b", "olmo3-32b"),
                         testing::ParamName());

// tandem's long-context recipe (OLMo-core's YaRN via rope_scaling) and the released 7B config.json
// (transformers' YaRN) describe the same model.
TEST(Released, LongContextRecipeIsTheReleasedModel) {
  const model::ModelConfig released = model::model_config_from_hf(
      json::parse(core::read_file(testing::fixture("model/released/olmo3-7b-config.json"))), "7b");
  const model::ModelConfig recipe = model::load_model_config(
      std::string(TANDEM_SOURCE_DIR) + "/configs/olmo3-7b-long-context.yaml", {});
  EXPECT_EQ(recipe.layer_windows, released.layer_windows);
  EXPECT_EQ(recipe.max_sequence_length, released.max_sequence_length);
  EXPECT_EQ(recipe.head_dim, released.head_dim);
  EXPECT_EQ(recipe.layer_norm_eps, released.layer_norm_eps);
  EXPECT_TRUE(recipe.full_attention_rope.olmo_core_formula);
  expect_same_rope(recipe.full_attention_rope, released.full_attention_rope, recipe.head_dim);
  expect_same_rope(recipe.sliding_attention_rope, released.sliding_attention_rope, recipe.head_dim);
  // 32B: its model recipe with OLMo-core's default YaRN at 65536 positions.
  const model::ModelConfig released32 = model::model_config_from_hf(
      json::parse(core::read_file(testing::fixture("model/released/olmo3-32b-config.json"))),
      "32b");
  const model::ModelConfig recipe32 = model::load_model_config(
      std::string(TANDEM_SOURCE_DIR) + "/configs/models/olmo3-32b.yaml",
      {"model.rope_scaling={name: yarn}", "model.max_sequence_length=65536"});
  EXPECT_EQ(recipe32.layer_windows, released32.layer_windows);
  EXPECT_EQ(recipe32.n_kv_heads, released32.n_kv_heads);
  expect_same_rope(recipe32.full_attention_rope, released32.full_attention_rope, 128);
  expect_same_rope(recipe32.sliding_attention_rope, released32.sliding_attention_rope, 128);
}

// The released checkpoints keep the tokenizer's 100278 embedding rows; tandem's recipes train with
// 100352. trainer.init_from pads the release to the recipe's rows, so its check
// (check_initial_weights) passes for every recipe that starts from such a release (read as plain
// HF, it would not).
TEST(Released, InitFromTheReleaseFitsTheRecipes) {
  const std::string configs = std::string(TANDEM_SOURCE_DIR) + "/configs/";
  for (const auto& [release, recipes] :
       {std::pair<std::string, std::vector<std::string>>{
            "olmo3-7b",
            {"olmo3-7b-stage1.yaml", "olmo3-7b-stage2.yaml", "olmo3-7b-long-context.yaml"}},
        {"olmo3-32b", {"models/olmo3-32b.yaml"}}}) {
    const std::string dir = testing::temp_dir("released_" + release);
    testing::write_text(
        dir + "/config.json",
        core::read_file(testing::fixture("model/released/" + release + "-config.json")));
    for (const std::string& recipe : recipes) {
      const model::ModelConfig mine = model::load_model_config(configs + recipe, {});
      ASSERT_EQ(mine.embedding_size, 100352) << recipe;
      model::LoadOptions options;
      options.embedding_size = mine.embedding_size;
      const model::ModelConfig found = model::read_model_dir_config(dir, options);
      EXPECT_EQ(found.vocab_size, 100278) << release;
      EXPECT_NO_THROW(model::check_initial_weights(dir, found, mine)) << recipe;
      EXPECT_THROW(model::check_initial_weights(dir, model::read_model_dir_config(dir), mine),
                   core::Error)
          << recipe;
    }
  }
}

}  // namespace
}  // namespace tandem
