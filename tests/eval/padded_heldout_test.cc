// AI2's held-out evaluation against OLMo-core's own (fixture: tools/make_heldout_fixtures.py ran
// NumpyPaddedFSLDataset, LMEvaluator and EvaluatorCallback.perform_eval on a tiny OLMo-core model
// over sets laid out like AI2's v3 small perplexity validation sets).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "eval_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/eval/padded_heldout.h"
#include "tandem/model/model_io.h"

namespace tandem::eval {
namespace {

std::string padded_dir() { return test::fixtures() + "/padded_heldout"; }

const nlohmann::json& expected() {
  static nlohmann::json j = nlohmann::json::parse(core::read_file(padded_dir() + "/expected.json"));
  return j;
}

data::PaddedDatasetOptions options() {
  const auto& e = expected();
  data::PaddedDatasetOptions o;
  o.sequence_length = e.at("sequence_length");
  o.eos_token_id = e.at("eos_token_id");
  o.pad_token_id = e.at("pad_token_id");
  o.vocab_size = 512;
  o.dtype = io::token_dtype_from_name(e.at("dtype"));
  return o;
}

PaddedHeldoutConfig config(std::int64_t batch_instances) {
  PaddedHeldoutConfig c;
  c.sets = discover_padded_sets(padded_dir() + "/" + expected().at("sets_dir").get<std::string>());
  c.batch_size = batch_instances * expected().at("sequence_length").get<std::int64_t>();
  c.batch_instances = 3;  // forward-pass grouping only
  return c;
}

TEST(PaddedHeldout, SetsFromAi2FolderLayout) {
  auto sets =
      discover_padded_sets(padded_dir() + "/" + expected().at("sets_dir").get<std::string>());
  std::vector<std::string> labels;
  for (const auto& s : sets) {
    labels.push_back(s.label);
    EXPECT_EQ(s.files.size(), 1u) << s.label;
  }
  // OLMo-core's v3-small-ppl-validation mix: the same labels in the same order.
  EXPECT_EQ(labels, expected().at("labels").get<std::vector<std::string>>());
}

TEST(PaddedHeldout, InstancesEqualNumpyPaddedFslDataset) {
  PaddedHeldout h(config(1), options());
  const auto& want = expected().at("instances");
  ASSERT_EQ(h.dataset().num_instances(), want.size());
  const std::int64_t T = options().sequence_length;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(T));
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(T));
  bool truncated = false, eos_only = false;
  for (std::size_t i = 0; i < want.size(); ++i) {
    h.dataset().read_instance(i, ids, mask);
    EXPECT_EQ(ids, want[i].at("input_ids").get<std::vector<std::int64_t>>()) << i;
    std::vector<std::uint8_t> want_mask;
    for (bool b : want[i].at("label_mask")) want_mask.push_back(b);
    EXPECT_EQ(mask, want_mask) << i;
    EXPECT_EQ(h.dataset().label(i), want[i].at("label").get<std::string>()) << i;
    truncated |= h.dataset().length(i) == T && ids.back() != options().eos_token_id;
    eos_only |= h.dataset().length(i) == 1;
  }
  // The fixture exercises both edge cases of the reduction.
  EXPECT_TRUE(truncated);
  EXPECT_TRUE(eos_only);
}

TEST(PaddedHeldout, LossPerSetEqualsOlmoCoreEvaluator) {
  auto model = model::load_model(padded_dir() + "/model", tandem::testing::cpu_backend());
  for (const auto& run : expected().at("runs")) {
    const std::int64_t per_batch = run.at("batch_instances");
    PaddedHeldout h(config(per_batch), options());
    std::vector<std::uint32_t> order;
    for (auto i : run.at("order")) order.push_back(i.get<std::uint32_t>());
    EXPECT_EQ(h.order(), order) << "batch of " << per_batch;
    for (const auto& r : h.evaluate(*model)) {
      const double want_loss = run.at("metrics").at(r.label + "/CE loss");
      const double want_ppl = run.at("metrics").at(r.label + "/PPL");
      // OLMo-core accumulates in float32 on the CPU; 1e-6 relative is the issue's bar.
      EXPECT_NEAR(r.loss, want_loss, 1e-6 * want_loss) << r.label << " batch " << per_batch;
      EXPECT_NEAR(r.perplexity, want_ppl, 1e-6 * want_ppl) << r.label << " batch " << per_batch;
    }
  }
}

TEST(PaddedHeldout, TailDropFollowsTheEvalBatch) {
  // 48 instances: batches of 5 leave 3 out, as OLMo-core's loader does.
  PaddedHeldout one(config(1), options()), five(config(5), options());
  EXPECT_EQ(one.order().size(), 48u);
  EXPECT_EQ(five.order().size(), 45u);
}

TEST(PaddedHeldout, SetsFromOlmoCoresManifest) {
  // evaluation.padded.mix: OLMo-core's v3-small-ppl-validation manifest, read as from_data_mix
  // reads it, gives the same sets in the same order as the folder layout.
  YAML::Node node = YAML::Load("{mix: " + padded_dir() +
                               "/v3-small-ppl-validation.txt, mix_base_dir: " + padded_dir() +
                               ", mix_tokenizer_id: dolma2-tokenizer}");
  PaddedHeldoutConfig c =
      parse_padded_heldout_config(io::ConfigSection(node, "evaluation.padded"), "");
  auto folders =
      discover_padded_sets(padded_dir() + "/" + expected().at("sets_dir").get<std::string>());
  ASSERT_EQ(c.sets.size(), folders.size());
  for (std::size_t i = 0; i < c.sets.size(); ++i) {
    EXPECT_EQ(c.sets[i].label, folders[i].label);
    ASSERT_EQ(c.sets[i].files.size(), 1u);
    EXPECT_TRUE(std::filesystem::equivalent(c.sets[i].files[0], folders[i].files[0]));
  }
}

TEST(PaddedHeldout, ConfigFromYaml) {
  const std::string root = padded_dir() + "/" + expected().at("sets_dir").get<std::string>();
  YAML::Node node = YAML::Load("{root: " + root + ", batch_size: 320, seed: 3}");
  PaddedHeldoutConfig c =
      parse_padded_heldout_config(io::ConfigSection(node, "evaluation.padded"), "");
  EXPECT_EQ(c.sets.size(), 11u);
  EXPECT_EQ(c.batch_size, 320);
  EXPECT_EQ(c.seed, 3);
  YAML::Node bad = YAML::Load("{root: " + root + ", batch_sise: 320}");
  EXPECT_THROW(parse_padded_heldout_config(io::ConfigSection(bad, "evaluation.padded"), ""),
               core::Error);
  YAML::Node none = YAML::Load("{seed: 1}");
  EXPECT_THROW(parse_padded_heldout_config(io::ConfigSection(none, "evaluation.padded"), ""),
               core::Error);
}

TEST(PaddedHeldout, FileWithoutEosIsNamed) {
  const std::string tmp = test::scratch_dir("padded_no_eos");
  std::vector<std::uint32_t> tokens{1, 2, 3, 4};
  core::write_file_atomic(tmp + "/x.npy", std::string(reinterpret_cast<const char*>(tokens.data()),
                                                      tokens.size() * sizeof(std::uint32_t)));
  PaddedHeldoutConfig c;
  c.sets = {{"x-validation", {tmp + "/x.npy"}}};
  try {
    PaddedHeldout h(c, options());
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp + "/x.npy"), std::string::npos) << e.what();
  }
}

TEST(PaddedHeldout, TandemEvalWithAConfig) {
  // `tandem eval CONFIG --checkpoint MODEL`: evaluation.padded from the config, OLMo-core's
  // numbers.
  const std::string tmp = test::scratch_dir("padded_cli");
  const std::string sets = padded_dir() + "/" + expected().at("sets_dir").get<std::string>();
  std::string train(640 * sizeof(std::uint32_t), '\0');  // a training file (ids 0)
  core::write_file_atomic(tmp + "/train.npy", train);
  auto config = [&](const std::string& train_path) {
    return fmt::format(R"(model: {{d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2,
  hidden_size: 128, vocab_size: 512, max_sequence_length: 64, sliding_window: {{pattern: [16, -1],
  force_full_attention_on_first_layer: false}}}}
data: {{paths: [{}], sequence_length: 64, global_batch_size: 64, seed: 1, vocab_size: 512,
  dtype: uint32, eos_token_id: 500, pad_token_id: 511}}
optim: {{lr: 1.0e-3}}
scheduler: {{name: constant}}
trainer: {{save_folder: {}/run, max_steps: 1}}
evaluation: {{padded: {{root: {}}}}}
)",
                       train_path, tmp, sets);
  };
  test::write_text(tmp + "/run.yaml", config(tmp + "/train.npy"));
  auto r = tandem::testing::run_tandem("eval " + tmp + "/run.yaml --checkpoint " + padded_dir() +
                                       "/model --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const auto& want = expected().at("runs")[0].at("metrics");
  for (const auto& label : expected().at("labels")) {
    const double loss = j["heldout"][label.get<std::string>()]["loss"];
    const double ref = want.at(label.get<std::string>() + "/CE loss");
    EXPECT_NEAR(loss, ref, 1e-6 * ref) << label;
  }
  // A held-out file that is also a training file is refused, naming it.
  const std::string pile = sets + "/pile/val/part-0-00000.npy";
  test::write_text(tmp + "/bad.yaml", config(pile));
  r = tandem::testing::run_tandem("eval " + tmp + "/bad.yaml --checkpoint " + padded_dir() +
                                  "/model");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("is also a training file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem::eval
