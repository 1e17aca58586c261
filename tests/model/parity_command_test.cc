// `tandem parity --save-logits FILE` writes the model's logits as a real .npy (what a third party
// needs to redo the comparison), with or without a reference; --intra-doc-eos runs the comparison
// under OLMo-core's intra-document masking.
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/io/npy.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

using testing::fixture;
using testing::run_tandem;

TEST(ParityCommand, SaveLogitsWritesTheModelsLogits) {
  const std::string d = fixture("model/window");
  const std::string out = testing::temp_dir("parity_save_logits");
  auto only = run_tandem("parity --model " + d + " --tokens " + d + "/ids.npy --save-logits " +
                         out + "/ours.npy --json");
  ASSERT_EQ(only.exit_code, 0) << only.output;
  EXPECT_EQ(nlohmann::json::parse(only.output)["saved_logits"], out + "/ours.npy");

  io::NpyArray saved = io::read_npy(out + "/ours.npy");
  io::NpyArray ids_arr = io::read_npy(d + "/ids.npy");
  auto model = model::load_model(d, tandem::testing::cpu_backend());
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  const std::int64_t V = model->config().embedding_size;
  EXPECT_EQ(saved.dtype, io::NpyDtype::kF32);
  ASSERT_EQ(saved.shape, (std::vector<std::int64_t>{B, T, V}));
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data());
  EXPECT_EQ(saved.as_f32(), logits);

  // With a reference too: the comparison runs, and the saved file as reference is an exact match.
  auto both = run_tandem("parity --model " + d + " --tokens " + d + "/ids.npy --reference " + d +
                         "/logits.npy --save-logits " + out + "/again.npy --json --max-kl 1e-6");
  ASSERT_EQ(both.exit_code, 0) << both.output;
  EXPECT_EQ(io::read_npy(out + "/again.npy").as_f32(), logits);
  auto self = run_tandem("parity --model " + d + " --tokens " + d + "/ids.npy --reference " + out +
                         "/ours.npy --json --max-abs-diff-rel 0");
  ASSERT_EQ(self.exit_code, 0) << self.output;
  EXPECT_EQ(nlohmann::json::parse(self.output)["max_abs_diff"], 0.0);

  auto neither = run_tandem("parity --model " + d + " --tokens " + d + "/ids.npy");
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_NE(neither.output.find("--save-logits"), std::string::npos) << neither.output;
}

TEST(ParityCommand, UnknownBackendIsRefusedByName) {
  const std::string d = fixture("model/window");
  auto r = run_tandem("parity --backend tpu --model " + d + " --tokens " + d +
                      "/ids.npy --reference " + d + "/logits.npy");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown backend 'tpu'"), std::string::npos) << r.output;
}

TEST(ParityCommand, IntraDocumentMasking) {
  const std::string d = fixture("model/document_mask");
  const std::string base = "parity --model " + d + " --tokens " + d + "/ids.npy --reference " + d +
                           "/logits.npy --grads " + d +
                           "/grads.safetensors --max-kl 1e-6 --max-grad-rel-l2 1e-4";
  auto masked = run_tandem(base + " --intra-doc-eos 3");
  EXPECT_EQ(masked.exit_code, 0) << masked.output;
  auto plain = run_tandem(base);
  EXPECT_EQ(plain.exit_code, 2) << plain.output;
}

}  // namespace
}  // namespace tandem
