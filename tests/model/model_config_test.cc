// Model config parsing: shipped recipes load, the OLMo 3 layer pattern, FLOP counts, and clear
// errors for unknown keys, wrong types and impossible sizes.
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/model/hf_config.h"
#include "tandem/model/model_config.h"

namespace tandem {
namespace {

std::string recipe(const std::string& name) {
  return std::string(TANDEM_SOURCE_DIR) + "/configs/models/" + name + ".yaml";
}

std::string config_error_of(const std::string& yaml,
                            const std::vector<std::string>& overrides = {}) {
  // One directory per test: CTest runs the tests of this file in parallel processes.
  std::string path =
      testing::temp_dir(std::string("model_config_") +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name()) +
      "/c.yaml";
  core::write_file_atomic(path, yaml);
  try {
    model::load_model_config(path, overrides);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

const char* kTiny =
    "model:\n  d_model: 64\n  n_layers: 5\n  n_heads: 4\n  hidden_size: 96\n  vocab_size: 1000\n";

TEST(ModelConfig, Olmo3SevenBRecipe) {
  model::ModelConfig c = model::load_model_config(recipe("olmo3-7b"), {});
  EXPECT_EQ(c.embedding_size, 100352);
  EXPECT_EQ(c.head_dim, 128);
  for (std::int64_t i = 0; i < c.n_layers; ++i)
    EXPECT_EQ(c.is_full_attention(i), i % 4 == 3 || i == c.n_layers - 1) << i;
  EXPECT_EQ(c.layer_windows[0], 4096);
  // Facts section 6: about 49.4 GFLOP per token at 8192.
  EXPECT_NEAR(c.flops_per_token(8192) / 1e9, 49.4, 0.1);
}

TEST(ModelConfig, OtherRecipesLoad) {
  model::ModelConfig big = model::load_model_config(recipe("olmo3-32b"), {});
  EXPECT_EQ(big.n_kv_heads, 8);
  model::ModelConfig o2 = model::load_model_config(recipe("olmo2-7b"), {});
  for (auto w : o2.layer_windows) EXPECT_EQ(w, 0);
  model::ModelConfig tiny = model::load_model_config(recipe("olmo3-tiny"), {});
  EXPECT_EQ(tiny.layer_windows, (std::vector<std::int64_t>{32, 32, 32, 0, 0}));
  model::load_model_config(recipe("olmo3-50m"), {});
  EXPECT_NEAR(model::load_model_config(recipe("olmo3-100m"), {}).total_params() / 1e6, 116, 2);
}

TEST(ModelConfig, OverridesApply) {
  model::ModelConfig c =
      model::load_model_config(recipe("olmo3-7b"), {"model.n_layers=6", "model.rope_theta=1e4"});
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_DOUBLE_EQ(c.full_attention_rope.theta, 1e4);
  EXPECT_DOUBLE_EQ(c.sliding_attention_rope.theta, 1e4);
  EXPECT_EQ(c.layer_windows.size(), 6u);
  EXPECT_EQ(c.layer_windows.back(), 0);
}

TEST(ModelConfig, UnknownKeyIsNamed) {
  std::string e = config_error_of(std::string(kTiny) + "  d_modle: 3\n");
  EXPECT_NE(e.find("model.d_modle"), std::string::npos) << e;
}

TEST(ModelConfig, WrongTypeIsNamed) {
  std::string e = config_error_of(std::string(kTiny), {"model.n_heads=four"});
  EXPECT_NE(e.find("model.n_heads"), std::string::npos) << e;
}

TEST(ModelConfig, ImpossibleSizesAreRejected) {
  EXPECT_NE(config_error_of(kTiny, {"model.n_kv_heads=3"}).find("n_kv_heads"), std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.d_model=0"}).find("d_model"), std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.head_dim=7"}).find("head_dim"), std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.embedding_size=10"}).find("embedding_size"),
            std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.sliding_window.pattern=[0]"}).find("pattern"),
            std::string::npos);
  EXPECT_NE(config_error_of("model: 3\n").find("model"), std::string::npos);
  // Sizes are bounded before a list per layer or the padded vocabulary is computed from them.
  EXPECT_NE(config_error_of(kTiny, {"model.n_layers=888888888888888888"}).find("n_layers"),
            std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.vocab_size=4611686018427387904"}).find("vocab_size"),
            std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.d_model=40960000"}).find("d_model"), std::string::npos);
  EXPECT_NE(config_error_of(kTiny, {"model.n_layers"}).find("key=value"), std::string::npos);
}

TEST(ModelConfig, HfJsonRoundTrip) {
  model::ModelConfig c = model::load_model_config(recipe("olmo3-7b"), {});
  c.embedding_size = c.vocab_size;
  model::ModelConfig back = model::model_config_from_hf(model::model_config_to_hf(c), "test");
  EXPECT_EQ(back.layer_windows, c.layer_windows);
  EXPECT_EQ(back.hidden_size, c.hidden_size);
  EXPECT_EQ(back.full_attention_rope, c.full_attention_rope);
  EXPECT_EQ(back.sliding_attention_rope, c.sliding_attention_rope);
  EXPECT_DOUBLE_EQ(back.layer_norm_eps, c.layer_norm_eps);
}

TEST(ModelConfig, HfUnsupportedModelTypeIsNamed) {
  nlohmann::json j = model::model_config_to_hf(model::load_model_config(recipe("olmo3-tiny"), {}));
  j["model_type"] = "llama";
  try {
    model::model_config_from_hf(j, "x/config.json");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
