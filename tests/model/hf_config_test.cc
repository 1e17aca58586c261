// HF config.json read exactly as transformers 5.x reads it, on fixtures written by
// tools/make_hf_config_fixtures.py: for each config.json as a user may have it (flat rope_theta
// without layer_types, nested rope_parameters, the released OLMo 3 YaRN rope_scaling, olmo2
// defaults, ...) tandem derives transformers' layer types, window, head_dim and, per layer type,
// the same RoPE frequencies and attention scaling; its logits (and YaRN gradients) match
// transformers' (per-token KL <= 1e-6, the HF parity bound); and hf -> tandem -> hf writes the
// config.json that transformers reloaded to bit-identical logits when the fixture was made.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/hf_config.h"
#include "tandem/model/model_io.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) { return json::parse(core::read_file(path)); }

std::string hf_case_dir(const std::string& name) {
  return testing::fixture("model/hf_configs/" + name);
}

class HfConfigCase : public ::testing::TestWithParam<const char*> {};

TEST_P(HfConfigCase, ReadsTheConfigAsTransformersDoes) {
  const std::string dir = hf_case_dir(GetParam());
  const json ref = read_json(dir + "/resolved.json");
  const model::ModelConfig c = model::model_config_from_hf(read_json(dir + "/config.json"), dir);
  EXPECT_EQ(c.n_layers, ref["num_hidden_layers"].get<std::int64_t>());
  EXPECT_EQ(c.n_kv_heads, ref["num_key_value_heads"].get<std::int64_t>());
  EXPECT_EQ(c.head_dim, ref["head_dim"].get<std::int64_t>());
  EXPECT_EQ(c.layer_norm_eps, ref["rms_norm_eps"].get<double>());
  const auto max_pos = ref["max_position_embeddings"].get<std::int64_t>();
  EXPECT_EQ(c.max_sequence_length, max_pos > 0 ? max_pos : -1);
  std::vector<std::int64_t> windows(static_cast<std::size_t>(c.n_layers), 0);
  for (std::size_t i = 0; i < ref["layer_types"].size(); ++i)
    if (ref["layer_types"][i] == "sliding_attention")
      windows[i] = ref["sliding_window"].get<std::int64_t>();
  EXPECT_EQ(c.layer_windows, windows);

  for (const auto& [type, r] : ref["rope"].items()) {
    const model::RopeConfig& ours =
        type == "sliding_attention" ? c.sliding_attention_rope : c.full_attention_rope;
    EXPECT_EQ(ours.type, r["rope_type"].get<std::string>()) << type;
    const auto f = model::rope_frequencies(ours, c.head_dim);
    const auto inv_freq = r["inv_freq"].get<std::vector<float>>();
    ASSERT_EQ(f.inv_freq.size(), inv_freq.size()) << type;
    for (std::size_t i = 0; i < inv_freq.size(); ++i)
      EXPECT_LE(tandem::testing::ulps(f.inv_freq[i], inv_freq[i]), 1) << type << " frequency " << i;
    EXPECT_NEAR(f.attention_factor, r["attention_scaling"].get<double>(), 1e-15) << type;
  }
}

TEST_P(HfConfigCase, LogitsAndGradientsMatchTransformers) {
  const std::string dir = hf_case_dir(GetParam());
  auto model = model::load_model(dir, tandem::testing::cpu_backend());
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data());
  eval::LogitParity p =
      eval::compare_logits(logits, V, io::read_npy(dir + "/logits.npy").as_f32(), V);
  EXPECT_LE(p.max_kl, 1e-6);
  EXPECT_LE(p.max_abs_diff, 1e-4 * p.max_ref_abs);
  EXPECT_EQ(p.top1_agreement, 1.0);
  if (fs::exists(dir + "/grads.safetensors")) {
    eval::GradParity g = eval::compare_gradients(*model, ids, B, T, dir + "/grads.safetensors");
    for (const auto& [name, rel] : g.rel_l2) EXPECT_LE(rel, 1e-4) << name;
  }
}

// hf -> tandem -> hf: the exported config.json is the one transformers reloaded to identical
// logits when the fixture was made, and tandem reloads it to bit-identical logits too.
TEST_P(HfConfigCase, ExportIsTheOneTransformersVerified) {
  const std::string dir = hf_case_dir(GetParam());
  const std::string root = testing::temp_dir(std::string("hf_config_export_") + GetParam());
  auto r1 = testing::run_tandem("convert --from hf " + dir + " --to tandem " + root + "/t");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = testing::run_tandem("convert --from tandem " + root + "/t --to hf " + root + "/h");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_EQ(read_json(root + "/h/config.json"), read_json(dir + "/exported_config.json"));

  auto original = model::load_model(dir, tandem::testing::cpu_backend()),
       exported = model::load_model(root + "/h", tandem::testing::cpu_backend());
  EXPECT_EQ(exported->config().full_attention_rope, original->config().full_attention_rope);
  EXPECT_EQ(exported->config().sliding_attention_rope, original->config().sliding_attention_rope);
  std::vector<std::int64_t> ids = io::read_npy(dir + "/ids.npy").as_i64();
  const std::int64_t T = io::read_npy(dir + "/ids.npy").shape[1], B = ids.size() / T;
  const std::int64_t V = original->config().embedding_size;
  std::vector<float> a(static_cast<std::size_t>(B * T * V)), b(a.size());
  original->forward_logits(ids.data(), B, T, a.data());
  exported->forward_logits(ids.data(), B, T, b.data());
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfConfigCase,
                         ::testing::Values("legacy_theta_no_layer_types", "defaults_only",
                                           "nested_thetas_custom_types", "flat_rope_parameters",
                                           "released_yarn", "yarn_beyond_original",
                                           "legacy_type_key_ignored", "olmo2_default_theta",
                                           "olmo2_yarn_mscale"),
                         testing::ParamName());

// The defects of issue 17 on their own: a config without layer_types gets transformers' pattern
// (no forced last layer), a flat rope_theta reaches the full-attention layers only.
TEST(HfConfig, LegacyConfigKeepsTransformersPatternAndTheta) {
  const model::ModelConfig c = model::model_config_from_hf(
      read_json(hf_case_dir("legacy_theta_no_layer_types") + "/config.json"), "");
  EXPECT_EQ(c.layer_windows, (std::vector<std::int64_t>{5, 5, 5, 0, 5, 5, 5}));
  EXPECT_EQ(c.full_attention_rope.theta, 10000.0);
  EXPECT_EQ(c.sliding_attention_rope.theta, 500000.0);
}

std::string hf_error_of(const json& hf) {
  try {
    model::model_config_from_hf(hf, "x/config.json");
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, WhatTransformersRefusesOrTandemCannotRunIsNamed) {
  const json base = {{"model_type", "olmo3"},    {"hidden_size", 16},      {"num_hidden_layers", 4},
                     {"num_attention_heads", 2}, {"intermediate_size", 8}, {"vocab_size", 10}};
  auto with = [&](const char* key, json value) {
    json j = base;
    j[key] = std::move(value);
    return hf_error_of(j);
  };
  EXPECT_EQ(hf_error_of(base), "");
  EXPECT_NE(with("layer_types", {"full_attention"}).find("layer_types"), std::string::npos);
  EXPECT_NE(with("layer_types", {"full_attention", "full_attention", "x", "full_attention"})
                .find("\"x\""),
            std::string::npos);
  EXPECT_NE(with("sliding_window", nullptr).find("sliding_window"), std::string::npos);
  EXPECT_NE(with("head_dim", nullptr).find("head_dim"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("gelu"), std::string::npos);
  EXPECT_NE(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}).find("llama3"),
            std::string::npos);
  EXPECT_NE(with("rope_scaling", {{"rope_type", "yarn"}}).find("factor"), std::string::npos);
  // Without rope_scaling a missing full_attention entry is fine (transformers adds the default).
  EXPECT_EQ(with("rope_parameters", {{"sliding_attention", {{"rope_theta", 1.0}}}}), "");
  json no_full = base;
  no_full["rope_parameters"] = {{"sliding_attention", {{"rope_theta", 1.0}}}};
  no_full["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_NE(hf_error_of(no_full).find("full_attention"), std::string::npos);
  EXPECT_NE(with("model_type", "llama").find("llama"), std::string::npos);
  // A layer count is checked before anything per layer is allocated (the fuzzer's finding: a
  // 7-exabyte allocation).
  EXPECT_NE(with("num_hidden_layers", 888888888888888888LL)
                .find("'num_hidden_layers' is 888888888888888888"),
            std::string::npos);
  EXPECT_NE(with("num_hidden_layers", 0).find("'num_hidden_layers' is 0"), std::string::npos);
  // A value of the wrong JSON type names the file.
  EXPECT_NE(with("hidden_act", 3).find("x/config.json"), std::string::npos);
  EXPECT_NE(with("hidden_size", "16").find("hidden_size"), std::string::npos);
  // ... and each value of the wrong type is named by its key, the value shown.
  EXPECT_NE(with("hidden_act", 3).find("'hidden_act' must be a string, got 3"), std::string::npos);
  EXPECT_NE(with("model_type", 3).find("'model_type'"), std::string::npos);
  EXPECT_NE(with("tie_word_embeddings", "no").find("'tie_word_embeddings'"), std::string::npos);
  EXPECT_NE(with("attention_bias", 0).find("'attention_bias'"), std::string::npos);
  const json yarn = {
      {"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 8}};
  auto yarn_with = [&](const char* key, json value) {
    json scaling = yarn;
    scaling[key] = std::move(value);
    return with("rope_scaling", scaling);
  };
  EXPECT_EQ(with("rope_scaling", yarn), "");
  EXPECT_NE(yarn_with("beta_fast", "fast").find("'beta_fast' must be a number, got \"fast\""),
            std::string::npos);
  EXPECT_NE(yarn_with("attention_factor", "1").find("'attention_factor'"), std::string::npos);
  EXPECT_NE(yarn_with("factor", "2").find("'factor'"), std::string::npos);
  EXPECT_NE(yarn_with("mscale", json::array()).find("'mscale'"), std::string::npos);
  EXPECT_NE(yarn_with("rope_type", 1).find("'rope_type'"), std::string::npos);
  EXPECT_NE(with("rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}}).find("'factor'"),
            std::string::npos);
}

// OLMo-core's export writes max_position_embeddings -1: no limit, and it survives a round trip.
TEST(HfConfig, MaxPositionEmbeddingsMinusOneMeansNoLimit) {
  json hf = {{"model_type", "olmo2"},        {"hidden_size", 16},      {"num_hidden_layers", 2},
             {"num_attention_heads", 2},     {"intermediate_size", 8}, {"vocab_size", 10},
             {"max_position_embeddings", -1}};
  const model::ModelConfig c = model::model_config_from_hf(hf, "x");
  EXPECT_EQ(c.max_sequence_length, -1);
  EXPECT_TRUE(c.accepts_sequence_length(1 << 20));
  EXPECT_EQ(model::model_config_to_hf(c)["max_position_embeddings"], -1);
  EXPECT_EQ(c.full_attention_rope.theta, 10000.0);  // Olmo2Config's default
}

}  // namespace
}  // namespace tandem
