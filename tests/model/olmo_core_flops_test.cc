// ModelConfig::olmo_core_flops_per_token against OLMo-core 3.0's own count
// (Transformer.num_flops_per_token, tests/fixtures/model/olmo_core_flops.json written by
// tools/make_flops_fixtures.py): OLMo-core's 7B, 32B, 1B and OLMo 2 7B recipes against tandem's
// recipes of the same models, and small models with sliding-window patterns, forced layers, GQA,
// MQA and a head_dim apart from d_model / n_heads, at sequence lengths on both sides of the
// windows. Integers, so equal to the FLOP; the parameter counts equal OLMo-core's too.
#include <gtest/gtest.h>

#include <string>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/model/model_config.h"

namespace tandem {
namespace {

using json = nlohmann::json;

const json& fixture_cases() {
  static const json cases =
      testing::read_json(testing::fixture("model/olmo_core_flops.json"))["cases"];
  return cases;
}

// The tandem model of a case: the recipe file it names, or its mapping written out as YAML (JSON
// is YAML's flow style).
model::ModelConfig model_of(const std::string& name, const json& c) {
  if (c.contains("tandem_recipe"))
    return model::load_model_config(
        std::string(TANDEM_SOURCE_DIR) + "/" + c["tandem_recipe"].get<std::string>(), {});
  const std::string path = testing::temp_dir("olmo_core_flops_" + name) + "/model.yaml";
  core::write_file_atomic(path, json{{"model", c["model"]}}.dump());
  return model::load_model_config(path, {});
}

TEST(OlmoCoreFlops, FixtureHasEveryKindOfCase) {
  const json& cases = fixture_cases();
  ASSERT_GE(cases.size(), 10u);
  for (const char* name : {"olmo3_7B", "olmo3_32B", "olmo3_1B", "olmo2_7B", "head_dim_mqa"})
    EXPECT_TRUE(cases.contains(name)) << name;
}

TEST(OlmoCoreFlops, EqualsOlmoCoresCountAtEverySequenceLength) {
  for (const auto& [name, c] : fixture_cases().items()) {
    SCOPED_TRACE(name);
    const model::ModelConfig m = model_of(name, c);
    EXPECT_EQ(m.total_params(), c["params"].get<std::int64_t>());
    const json& counts = c["olmo_core_flops_per_token"];
    ASSERT_FALSE(counts.empty());
    for (const auto& [seq, flops] : counts.items())
      EXPECT_EQ(m.olmo_core_flops_per_token(std::stoll(seq)), flops.get<std::int64_t>())
          << "seq " << seq;
  }
}

// The project's MFU count (flops_per_token) counts every query against min(window, seq) keys;
// OLMo-core's counts the pairs the causal mask lets through. At seq 1 nothing is masked and the
// two differ by the norm weights OLMo-core also counts (6 FLOPs each); at training lengths the
// masked pairs outweigh them and OLMo-core's count is the lower (5.7 % at OLMo 3 7B's 8192).
TEST(OlmoCoreFlops, CausalCountIsBelowTheProjectsCount) {
  const model::ModelConfig m = model::load_model_config(
      std::string(TANDEM_SOURCE_DIR) + "/configs/models/olmo3-7b.yaml", {});
  const std::int64_t norm_weights = m.n_layers * (m.q_width() + m.kv_width()) + m.d_model;
  EXPECT_EQ(static_cast<double>(m.olmo_core_flops_per_token(1)),
            m.flops_per_token(1) + 6.0 * static_cast<double>(norm_weights));
  // The figure docs/architecture.md gives.
  EXPECT_NEAR(
      1.0 - static_cast<double>(m.olmo_core_flops_per_token(8192)) / m.flops_per_token(8192), 0.057,
      0.0005);
  for (std::int64_t seq : {1024, 4096, 8192, 65536})
    EXPECT_LT(static_cast<double>(m.olmo_core_flops_per_token(seq)), m.flops_per_token(seq)) << seq;
}

TEST(CausalAttentionPairs, TriangleThenBand) {
  EXPECT_EQ(model::causal_attention_pairs(1, 0), 1);
  EXPECT_EQ(model::causal_attention_pairs(4, 0), 10);  // 1 + 2 + 3 + 4
  EXPECT_EQ(model::causal_attention_pairs(4, 4), 10);  // a window covering the sequence
  EXPECT_EQ(model::causal_attention_pairs(4, 9), 10);
  EXPECT_EQ(model::causal_attention_pairs(5, 2), 9);  // 1 + 2 + 2 + 2 + 2
  EXPECT_EQ(model::causal_attention_pairs(5, 1), 5);  // each token itself
  // OLMo 3's sliding layers at 8192: the first 4096 queries a triangle, the rest 4096 keys each.
  EXPECT_EQ(model::causal_attention_pairs(8192, 4096), 4096LL * 4097 / 2 + 4096LL * 4096);
  EXPECT_THROW(model::causal_attention_pairs(0, 0), core::Error);
  EXPECT_THROW(model::causal_attention_pairs(8, -1), core::Error);
}

}  // namespace
}  // namespace tandem
