// trainer.init_from must refuse weights of another architecture even when every tensor has the
// config's shape: 8 heads of 4 dimensions and 4 heads of 8 give identical tensors, and loading
// one as the other scrambles the function silently. Weights from an HF release, which keeps only
// the tokenizer's embedding rows, are padded to the config's embedding size.
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/model/model_config.h"
#include "tandem/model/model_io.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

using namespace core;
using namespace model;

TEST(InitFrom, OtherArchitectureWithTheSameShapesIsRefused) {
  const std::string config = testing::fixture("train/parity.yaml");
  ModelConfig other =
      load_model_config(config, {"model.n_heads=8", "model.n_kv_heads=4", "model.head_dim=4"});
  ModelConfig mine = load_model_config(config, {});
  ASSERT_EQ(other.total_params(), mine.total_params());
  Olmo3Model model(other, testing::cpu_backend());
  model.init_weights(7);
  const std::string dir = testing::temp_dir("init_from_other_arch");
  save_tandem_model(dir + "/model", model);

  auto r = testing::run_tandem("train " + config + " trainer.init_from=" + dir +
                               "/model trainer.save_folder=" + dir +
                               "/run trainer.max_steps=1 trainer.progress=false "
                               "trainer.peak_tflops=0.001 evaluation.interval=0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("another architecture"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_heads 8 (config: 4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("head_dim 4 (config: 8)"), std::string::npos) << r.output;
}

TEST(InitFrom, SameArchitectureIsAccepted) {
  const std::string config = testing::fixture("train/parity.yaml");
  Olmo3Model model(load_model_config(config, {}), testing::cpu_backend());
  model.init_weights(7);
  const std::string dir = testing::temp_dir("init_from_same_arch");
  save_tandem_model(dir + "/model", model);
  auto r = testing::run_tandem("train " + config + " trainer.init_from=" + dir +
                               "/model trainer.save_folder=" + dir +
                               "/run trainer.max_steps=1 trainer.progress=false "
                               "trainer.peak_tflops=0.001 evaluation.interval=0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// AI2's HF releases keep only the tokenizer's embedding rows (OLMo 3: 100278 of the 100352 it
// trained with). init_from pads them with zero rows to the config's embedding size: the run is
// the run from the same weights converted to a tandem model with that padding.
TEST(InitFrom, HfReleaseWithOnlyTheTokenizersRowsIsPaddedToTheConfigsEmbedding) {
  const std::string config = testing::fixture("train/parity.yaml");
  const std::string hf = testing::fixture("train/init_hf");  // 512 rows, as its vocabulary
  const std::string dir = testing::temp_dir("init_from_hf_padded");
  const std::string pad = " model.pad_vocab_to_multiple_of=640";
  ASSERT_EQ(load_model_config(config, {pad.substr(1)}).embedding_size, 640);
  auto c = testing::run_tandem("convert --from hf " + hf + " --to tandem " + dir +
                               "/padded --pad-vocab-multiple 640");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto train = [&](const std::string& init, const std::string& run) {
    auto r = testing::run_tandem("train " + config + pad + " trainer.init_from=" + init +
                                 " trainer.save_folder=" + dir + "/" + run +
                                 " trainer.max_steps=2 trainer.progress=false "
                                 "trainer.peak_tflops=0.001 evaluation.interval=0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::read_metrics(dir + "/" + run + "/metrics.jsonl");
  };
  const auto from_hf = train(hf, "from_hf"), from_tandem = train(dir + "/padded", "from_tandem");
  ASSERT_EQ(from_hf.size(), 2u);
  ASSERT_EQ(from_tandem.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i)
    for (const char* key : {"train/loss", "train/grad_norm"})
      EXPECT_EQ(from_hf[i][key], from_tandem[i][key]) << key << " step " << i + 1;
}

}  // namespace
}  // namespace tandem
