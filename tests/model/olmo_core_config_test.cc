// OLMo-core's model-config semantics for the keys tandem takes from OLMo-core, on fixtures written
// by tools/make_olmo_core_model_fixtures.py: models built with OLMo-core's own constructors and
// sliding-window options (first/last layer forcing on, off and left at OLMo-core's defaults;
// several patterns; YaRN through with_rope_scaling). From the same keyword arguments tandem
// derives OLMo-core's layer layout and RoPE scaling per layer, and its logits on OLMo-core's
// weights match OLMo-core's forward (per-token KL <= 1e-8), its gradients OLMo-core's backward.
// Directories written by OLMo-core's save_hf_model load as they are and match transformers on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/model_io.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using json = nlohmann::json;

std::string olmo_core_case_dir(const std::string& name) {
  return testing::fixture("model/olmo_core/" + name);
}

eval::LogitParity run_and_compare(model::Olmo3Model& model, const std::string& ids_path,
                                  const std::string& ref_path) {
  io::NpyArray ids_arr = io::read_npy(ids_path);
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t V = model.config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model.forward_logits(ids.data(), B, T, logits.data());
  io::NpyArray ref = io::read_npy(ref_path);
  return eval::compare_logits(logits, V, ref.as_f32(), ref.shape[2]);
}

class OlmoCoreCase : public ::testing::TestWithParam<const char*> {};

TEST_P(OlmoCoreCase, LayoutAndRopeScalingAreOlmoCores) {
  const std::string dir = olmo_core_case_dir(GetParam());
  const json ref = json::parse(core::read_file(dir + "/olmo_core.json"));
  const model::ModelConfig c = model::load_model_config(dir + "/model.yaml", {});
  EXPECT_EQ(c.layer_windows, ref["windows"].get<std::vector<std::int64_t>>());
  const auto scaled = ref["rope_scaled"].get<std::vector<bool>>();
  ASSERT_EQ(static_cast<std::int64_t>(scaled.size()), c.n_layers);
  for (std::int64_t l = 0; l < c.n_layers; ++l)
    EXPECT_EQ(c.rope_of_layer(l).type == "yarn", scaled[static_cast<std::size_t>(l)]) << l;
}

TEST_P(OlmoCoreCase, LogitsMatchOlmoCoresForward) {
  const std::string dir = olmo_core_case_dir(GetParam());
  auto model =
      model::load_model(dir, tandem::testing::cpu_backend());  // model.yaml + OLMo-core's state
                                                               // dict (same names as tandem's)
  eval::LogitParity p = run_and_compare(*model, dir + "/ids.npy", dir + "/logits.npy");
  EXPECT_LE(p.max_kl, 1e-8);
  EXPECT_EQ(p.top1_agreement, 1.0);
  EXPECT_GT(p.max_ref_abs, 0.5) << "reference logits are degenerate";
}

// The gradients of the mean next-token cross-entropy against OLMo-core's, computed by the fixture
// tool in float64 (a deep copy of the fp32 model; HF's names through OLMo-core's converter): each
// tensor within max(1e-4, 2 x the distance of OLMo-core's own fp32 gradients from them), the judge
// of tools/check_olmo_core_model_random.py (its seeds 1-11: tandem within 7.8e-5 of float64, where
// OLMo-core's fp32 reached 1.17e-4).
TEST_P(OlmoCoreCase, GradientsMatchOlmoCoresInFloat64) {
  const std::string dir = olmo_core_case_dir(GetParam());
  auto model = model::load_model(dir, tandem::testing::cpu_backend());
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const eval::GradParity g = eval::compare_gradients(*model, ids, ids_arr.shape[0],
                                                     ids_arr.shape[1], dir + "/grads.safetensors");
  const json reference_error = json::parse(core::read_file(dir + "/grads_reference_error.json"));
  ASSERT_EQ(g.rel_l2.size(), model->layout().entries().size());
  ASSERT_EQ(reference_error.size(), g.rel_l2.size());
  double worst = 0.0, olmo_core_worst = 0.0;
  for (const auto& [name, rel] : g.rel_l2) {
    ASSERT_TRUE(reference_error.contains(name)) << name;
    const double theirs = reference_error[name].get<double>();
    EXPECT_LE(rel, std::max(1e-4, 2.0 * theirs)) << name << " (OLMo-core's fp32: " << theirs << ")";
    worst = std::max(worst, rel);
    olmo_core_worst = std::max(olmo_core_worst, theirs);
  }
  RecordProperty("worst_grad_rel_l2", fmt::format("{:.2e}", worst));
  RecordProperty("olmo_core_fp32_worst_grad_rel_l2", fmt::format("{:.2e}", olmo_core_worst));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OlmoCoreCase,
                         ::testing::Values("olmo3_layout", "flags_default", "first_forced_yarn",
                                           "none_forced", "yarn_all_layers", "olmo3_yarn_export",
                                           "theta_export", "olmo2"),
                         testing::ParamName());

class OlmoCoreHfExport : public ::testing::TestWithParam<const char*> {};

// save_hf_model's directory (max_position_embeddings -1, legacy rope_theta / rope_scaling) loads
// as it is and gives transformers' logits for it.
TEST_P(OlmoCoreHfExport, LoadsAsItIsAndMatchesTransformers) {
  const std::string dir = olmo_core_case_dir(GetParam()) + "/hf";
  auto model = model::load_model(dir, tandem::testing::cpu_backend());
  EXPECT_EQ(model->config().max_sequence_length, -1);
  eval::LogitParity hf =
      run_and_compare(*model, olmo_core_case_dir(GetParam()) + "/ids.npy", dir + "/hf_logits.npy");
  EXPECT_LE(hf.max_kl, 1e-6);
  EXPECT_EQ(hf.top1_agreement, 1.0);
  // The same weights in OLMo-core's own format give the same layout.
  EXPECT_EQ(
      model->config().layer_windows,
      model::load_model_config(olmo_core_case_dir(GetParam()) + "/model.yaml", {}).layer_windows);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OlmoCoreHfExport,
                         ::testing::Values("olmo3_layout", "olmo3_yarn_export", "theta_export",
                                           "olmo2"),
                         testing::ParamName());

// Where OLMo-core's export describes OLMo-core's own model (theta 500000), tandem on the export
// matches OLMo-core's forward too. With another theta the export's flat rope_theta reaches only
// the full-attention layers in transformers 5 (and so in tandem): the exported model differs.
TEST(OlmoCoreHfExport, ExportEqualsOlmoCoreOnlyAtTheDefaultTheta) {
  for (const char* name : {"olmo3_layout", "olmo3_yarn_export", "olmo2"}) {
    auto model =
        model::load_model(olmo_core_case_dir(name) + "/hf", tandem::testing::cpu_backend());
    eval::LogitParity p = run_and_compare(*model, olmo_core_case_dir(name) + "/ids.npy",
                                          olmo_core_case_dir(name) + "/logits.npy");
    EXPECT_LE(p.max_kl, 1e-8) << name;
  }
  auto model =
      model::load_model(olmo_core_case_dir("theta_export") + "/hf", tandem::testing::cpu_backend());
  EXPECT_EQ(model->config().full_attention_rope.theta, 20000.0);
  EXPECT_EQ(model->config().sliding_attention_rope.theta, 500000.0);
  eval::LogitParity p = run_and_compare(*model, olmo_core_case_dir("theta_export") + "/ids.npy",
                                        olmo_core_case_dir("theta_export") + "/logits.npy");
  EXPECT_GT(p.max_kl, 1e-5);
}

// OLMo-core's defaults for the keys tandem shares: layer_norm_eps 1e-5 (llama_like,
// LayerNormConfig), rope_theta 500000, both window forcings on.
TEST(OlmoCoreConfig, DefaultsAreOlmoCores) {
  const std::string path = testing::temp_dir("olmo_core_defaults") + "/m.yaml";
  core::write_file_atomic(path,
                          "model:\n  d_model: 16\n  n_layers: 6\n  n_heads: 2\n  hidden_size: 32\n"
                          "  vocab_size: 64\n  sliding_window: {pattern: [8, -1]}\n"
                          "  rope_scaling: {name: yarn}\n");
  const model::ModelConfig c = model::load_model_config(path, {});
  EXPECT_EQ(c.layer_norm_eps, 1e-5);
  EXPECT_EQ(c.layer_windows, (std::vector<std::int64_t>{0, 8, 0, 8, 0, 0}));
  // YaRNRoPEScalingConfig(): factor 8, betas 32 / 1, old_context_len 8192, full layers only.
  EXPECT_EQ(c.full_attention_rope.type, "yarn");
  EXPECT_EQ(c.full_attention_rope.factor, 8.0);
  EXPECT_EQ(c.full_attention_rope.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.full_attention_rope.attention_factor, 0.1 * std::log(8.0) + 1.0);
  EXPECT_TRUE(c.full_attention_rope.olmo_core_formula);
  EXPECT_EQ(c.sliding_attention_rope.type, "default");
  EXPECT_EQ(c.sliding_attention_rope.theta, 500000.0);
}

// A tandem model directory written from any of these configs reads back to the same config.
TEST(OlmoCoreConfig, TandemYamlRoundTrips) {
  for (const char* name : {"flags_default", "first_forced_yarn", "yarn_all_layers"}) {
    auto model = model::load_model(olmo_core_case_dir(name), tandem::testing::cpu_backend());
    const std::string out = testing::temp_dir(std::string("olmo_core_yaml_") + name);
    model::save_tandem_model(out, *model);
    const model::ModelConfig back = model::load_model_config(out + "/model.yaml", {});
    EXPECT_EQ(back.layer_windows, model->config().layer_windows) << name;
    EXPECT_EQ(back.full_attention_rope, model->config().full_attention_rope) << name;
    EXPECT_EQ(back.sliding_attention_rope, model->config().sliding_attention_rope) << name;
  }
}

}  // namespace
}  // namespace tandem
