// trainer.init_from must refuse weights of another architecture even when every tensor has the
// config's shape: 8 heads of 4 dimensions and 4 heads of 8 give identical tensors, and loading
// one as the other scrambles the function silently. An HF release's embedding rows (only the
// tokenizer's, as OLMo 3's, or all it trained, as OLMo 2's) are padded to the config's embedding.
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

// `tandem train` of the fixture recipe with its embedding padded to 640 rows (512 vocabulary),
// 2 steps from `init` into `run`: its exit code and output, and its metrics.
struct PaddedRun {
  testing::CommandResult result;
  std::vector<nlohmann::json> metrics;
};
PaddedRun train_padded(const std::string& init, const std::string& run) {
  PaddedRun out;
  out.result =
      testing::run_tandem("train " + testing::fixture("train/parity.yaml") +
                          " model.pad_vocab_to_multiple_of=640 trainer.init_from=" + init +
                          " trainer.save_folder=" + run +
                          " trainer.max_steps=2 trainer.progress=false trainer.peak_tflops=0.001 "
                          "evaluation.interval=0");
  if (out.result.exit_code == 0) out.metrics = testing::read_metrics(run + "/metrics.jsonl");
  return out;
}

void expect_same_runs(const PaddedRun& a, const PaddedRun& b) {
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output;
  ASSERT_EQ(b.result.exit_code, 0) << b.result.output;
  ASSERT_EQ(a.metrics.size(), 2u);
  ASSERT_EQ(b.metrics.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i)
    for (const char* key : {"train/loss", "train/grad_norm"})
      EXPECT_EQ(a.metrics[i][key], b.metrics[i][key]) << key << " step " << i + 1;
}

// AI2's OLMo 3 HF releases keep only the tokenizer's embedding rows (100278 of the 100352 it
// trained with). init_from pads them with zero rows to the config's embedding size: the run is
// the run from the same weights converted to a tandem model with that padding.
TEST(InitFrom, HfReleaseWithOnlyTheTokenizersRowsIsPaddedToTheConfigsEmbedding) {
  const std::string hf = testing::fixture("train/init_hf");  // 512 rows, as its vocabulary
  const std::string dir = testing::temp_dir("init_from_hf_padded");
  ASSERT_EQ(load_model_config(testing::fixture("train/parity.yaml"),
                              {"model.pad_vocab_to_multiple_of=640"})
                .embedding_size,
            640);
  auto c = testing::run_tandem("convert --from hf " + hf + " --to tandem " + dir +
                               "/padded --pad-vocab-multiple 640");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expect_same_runs(train_padded(hf, dir + "/from_hf"),
                   train_padded(dir + "/padded", dir + "/from_tandem"));
}

// OLMo 2's HF releases store every embedding row they trained (config.json vocab_size 100352 for
// the tokenizer's 100278): such a model fits a config of the tokenizer's vocabulary padded to that
// many rows, and its extra rows load as they are, also after conversion to a tandem model. A model
// with fewer rows than the config's vocabulary is another tokenizer's: refused.
TEST(InitFrom, HfReleaseWithAllItsPaddedRowsLoadsThemAsTheyAre) {
  const std::string dir = testing::temp_dir("init_from_hf_all_rows");
  LoadOptions options;
  options.embedding_size = 640;
  ModelWeights w = read_model_weights(testing::fixture("train/init_hf"), options);
  ASSERT_EQ(w.config.vocab_size, 512);
  const ParameterLayout layout(w.config);
  // The padded rows as a run that trained them holds them: not zero.
  for (const char* name : {"embeddings.weight", "lm_head.w_out.weight"}) {
    const ParameterEntry& e = layout.entry(name);
    for (std::int64_t i = 512 * w.config.d_model; i < e.numel; ++i)
      w.flat[e.offset + i] = 0.01f * static_cast<float>(i % 7 - 3);
  }
  save_tandem_model(dir + "/tandem", w.config, w.flat);
  ModelConfig all_rows = w.config;
  all_rows.vocab_size = 640;
  save_hf_model(dir + "/hf", all_rows, w.flat, io::DType::kF32);
  const PaddedRun from_tandem = train_padded(dir + "/tandem", dir + "/from_tandem");
  expect_same_runs(train_padded(dir + "/hf", dir + "/from_hf"), from_tandem);
  // The same release converted to a tandem model first: its model.yaml keeps vocab_size 640.
  auto c =
      testing::run_tandem("convert --from hf " + dir + "/hf --to tandem " + dir + "/converted");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  ASSERT_EQ(read_model_dir_config(dir + "/converted").vocab_size, 640);
  expect_same_runs(train_padded(dir + "/converted", dir + "/from_converted"), from_tandem);

  ModelConfig fewer_rows = w.config;
  fewer_rows.vocab_size = 500;
  save_hf_model(dir + "/hf500", fewer_rows, w.flat, io::DType::kF32);
  const PaddedRun refused = train_padded(dir + "/hf500", dir + "/from_hf500");
  EXPECT_EQ(refused.result.exit_code, 1) << refused.result.output;
  EXPECT_NE(refused.result.output.find("vocab_size 500 (config: 512)"), std::string::npos)
      << refused.result.output;
}

}  // namespace
}  // namespace tandem
