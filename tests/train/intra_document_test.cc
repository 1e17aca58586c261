// Intra-document masking in the training loop and in held-out evaluation
// (data.generate_doc_lengths, OLMo-core's doc_lens), on the curve-parity data with an EOS written
// over every 13th token (so each 64-token instance packs several documents): `tandem train` logs
// the loss of the masked model function on its first batch, a different loss than without
// masking; and the held-out loss under masking equals the loss of every document run on its own
// (the labels still cross to the next document, as in OLMo-core, where labels are the instance's
// next tokens).
#include <gtest/gtest.h>

#include <filesystem>

#include <zlib.h>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/data/loader.h"
#include "tandem/eval/heldout.h"
#include "tandem/model/documents.h"
#include "tandem/model/model_io.h"
#include "tandem/optim/loss_normalization.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

using testing::fixture;

// A copy of a uint16 token file with EOS (id 0) over every 13th token.
std::string with_documents(const std::string& name) {
  const std::string dir = testing::temp_dir("intra_doc_data_" + name);
  std::string bytes = core::read_file(fixture("train/" + name));
  for (std::size_t i = 0; i + 1 < bytes.size(); i += 2 * 13) bytes[i] = bytes[i + 1] = 0;
  core::write_file_atomic(dir + "/" + name, bytes);
  return dir + "/" + name;
}

std::vector<std::string> overrides(bool masked) {
  // Made per test: temp_dir's folders go when their test passes.
  const std::string train =
      "[" + with_documents("train_a.npy") + ", " + with_documents("train_b.npy") + "]";
  const std::string heldout = with_documents("heldout.npy");
  return {"trainer.init_from=" + fixture("train/init_hf"), "data.paths=" + train,
          "evaluation.sets=[{name: heldout, paths: [" + heldout + "]}]",
          "data.generate_doc_lengths=" + std::string(masked ? "true" : "false")};
}

// Mean CE of the initial model on the first global batch, with or without documents.
double first_batch_loss(bool masked) {
  train::RunConfig config = train::load_run_config(fixture("train/parity.yaml"), overrides(masked));
  data::Loader loader(config.data, data::LoaderOptions{.prefetch = false});
  data::Batch batch = loader.next_batch(0, 1);
  auto model = model::load_model(fixture("train/init_hf"), tandem::testing::cpu_backend());
  const auto n = static_cast<std::int64_t>(batch.num_instances());
  const std::int64_t T = config.data.sequence_length;
  std::vector<std::int64_t> starts =
      model::document_starts(batch.input_ids.data(), n, T, config.data.eos_token_id);
  // The batch must really hold several documents in some instance.
  std::int64_t documents = 0;
  for (std::int64_t b = 0; b < n; ++b) documents += model::document_lengths(starts, b, T).size();
  EXPECT_GT(documents, n);
  const std::vector<std::int64_t> labels =
      optim::make_labels(batch.input_ids.data(), n, T, batch.instance_mask.data());
  model::LossSums s = model->forward_backward(batch.input_ids.data(), labels.data(), n, T, 0.0f,
                                              1.0f, false, masked ? starts.data() : nullptr);
  return s.ce_sum / static_cast<double>(s.count);
}

TEST(IntraDocument, TrainingStepUsesTheDocumentsOfEachInstance) {
  for (bool masked : {true, false}) {
    const std::string run =
        testing::temp_dir(std::string("intra_doc_train_") + (masked ? "masked" : "plain"));
    std::string args =
        fixture("train/parity.yaml") + " trainer.save_folder=" + run +
        " trainer.max_steps=1 trainer.progress=false evaluation.interval=0 trainer.peak_tflops=0.1";
    for (const auto& o : overrides(masked)) args += " '" + o + "'";
    auto r = testing::run_tandem("train " + args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto metrics = testing::read_metrics(run + "/metrics.jsonl");
    ASSERT_EQ(metrics.size(), 1u);
    const double logged = metrics[0]["train/loss"].get<double>();
    EXPECT_NEAR(logged, first_batch_loss(masked), 1e-5 * logged) << "masked " << masked;
  }
  EXPECT_GT(std::abs(first_batch_loss(true) - first_batch_loss(false)), 1e-4);
}

TEST(IntraDocument, HeldoutLossIsEveryDocumentOnItsOwn) {
  train::RunConfig config = train::load_run_config(fixture("train/parity.yaml"), overrides(true));
  ASSERT_FALSE(config.eval.sets.empty());
  const std::int64_t instances = 6;
  eval::HeldoutSet set =
      eval::open_heldout_set("heldout", config.eval.sets[0].files, config.data, instances);
  ASSERT_TRUE(set.intra_document);
  auto model = model::load_model(fixture("train/init_hf"), tandem::testing::cpu_backend());
  eval::HeldoutResult masked = eval::evaluate_heldout(*model, set, 4);

  // Each document alone: its logits, scored against the instance's next tokens.
  const std::int64_t T = config.data.sequence_length, V = model->config().embedding_size;
  double ce = 0.0;
  std::int64_t count = 0, documents = 0;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < set.instances; ++i) {
    set.dataset->read_instance(static_cast<std::uint64_t>(i), ids);
    const auto starts = model::document_starts(ids.data(), 1, T, config.data.eos_token_id);
    std::int64_t begin = 0;
    for (std::int64_t len : model::document_lengths(starts, 0, T)) {
      ++documents;
      std::vector<float> logits(static_cast<std::size_t>(len * V));
      model->forward_logits(ids.data() + begin, 1, len, logits.data());
      for (std::int64_t t = 0; t < len && begin + t + 1 < T; ++t) {
        const float* row = logits.data() + t * V;
        double mx = row[0], sum = 0.0;
        for (std::int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
        for (std::int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
        ce += mx + std::log(sum) - row[ids[begin + t + 1]];
        ++count;
      }
      begin += len;
    }
  }
  EXPECT_GT(documents, set.instances);
  EXPECT_EQ(masked.tokens, count);
  EXPECT_NEAR(masked.loss, ce / static_cast<double>(count), 1e-5 * masked.loss);

  set.intra_document = false;
  EXPECT_GT(std::abs(eval::evaluate_heldout(*model, set, 4).loss - masked.loss), 1e-4);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A packed, label-masked training config (OLMo-core's curve fixture over packed documents): its
// held-out sets are fixed windows of their own files, without the training data's packing,
// masks or permutation.
TEST(PackedTraining, HeldoutSetsStayFixedWindowsOfTheirOwnFiles) {
  train::RunConfig config =
      train::load_run_config(testing::fixture("olmo_core_packed/curve.yaml"), {});
  ASSERT_TRUE(config.data.packing.has_value());
  ASSERT_EQ(config.data.label_mask_files.size(), 4u);
  const std::string file = testing::fixture("olmo_core/part-00.npy");
  eval::HeldoutSet set = eval::open_heldout_set("heldout", {file}, config.data, 1000);
  EXPECT_FALSE(set.dataset->packed());
  EXPECT_FALSE(set.dataset->has_label_masks());
  EXPECT_EQ(set.instances, static_cast<std::int64_t>(9000 / 64));  // 9,000 uint16 tokens
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A copy of a uint16 token file with OLMo-core metadata (<name>.csv.gz) listing documents of 7 to
// 40 tokens that end wherever they end (mostly not at an EOS): only the metadata knows them.
std::string with_metadata_documents(const std::string& name) {
  const std::string dir = testing::temp_dir("metadata_docs_" + name);
  const std::string bytes = core::read_file(testing::fixture("train/" + name));
  core::write_file_atomic(dir + "/" + name, bytes);
  const std::uint64_t tokens = bytes.size() / 2;
  std::string lines;
  std::uint64_t start = 0;
  for (std::uint64_t k = 0; start + 7 <= tokens; ++k) {
    const std::uint64_t end = std::min(tokens, start + 7 + (k * 11) % 34);
    lines += std::to_string(start) + "," + std::to_string(end) + "\n";
    start = end;
  }
  const std::string path = dir + "/" + name.substr(0, name.size() - 4) + ".csv.gz";
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, lines.data(), static_cast<unsigned>(lines.size()));
  gzclose(gz);
  return dir + "/" + name;
}

// use_array_if_local: false with generate_doc_lengths: `tandem train` attends within the
// metadata's documents (the loader's document starts), not those an EOS scan of the row finds.
TEST(PackedTraining, MetadataDocumentsAreWhatTheTrainingStepAttendsWithin) {
  static const std::vector<std::string> overrides = {
      "trainer.init_from=" + testing::fixture("train/init_hf"),
      "data.paths=[" + with_metadata_documents("train_a.npy") + ", " +
          with_metadata_documents("train_b.npy") + "]",
      "data.dataset=packed",
      "data.use_array_if_local=false",
      "data.generate_doc_lengths=true",
      "evaluation.interval=0"};
  train::RunConfig config =
      train::load_run_config(testing::fixture("train/parity.yaml"), overrides);
  data::Loader loader(config.data, data::LoaderOptions{.prefetch = false});
  const data::Batch batch = loader.next_batch(0, 1);
  const auto n = static_cast<std::int64_t>(batch.num_instances());
  const std::int64_t T = config.data.sequence_length;
  ASSERT_EQ(batch.document_starts.size(), batch.input_ids.size());
  const std::vector<std::int64_t> labels = optim::make_labels(
      batch.input_ids.data(), n, T, batch.instance_mask.data(), batch.label_mask.data());
  auto loss_with = [&](const std::vector<std::int64_t>& starts) {
    auto model = model::load_model(testing::fixture("train/init_hf"), testing::cpu_backend());
    model::LossSums s = model->forward_backward(batch.input_ids.data(), labels.data(), n, T, 0.0f,
                                                1.0f, false, starts.data());
    return s.ce_sum / static_cast<double>(s.count);
  };
  const double metadata = loss_with(batch.document_starts);
  const double scanned =
      loss_with(model::document_starts(batch.input_ids.data(), n, T, config.data.eos_token_id));
  EXPECT_GT(std::abs(metadata - scanned), 1e-4);  // the two segmentations really differ

  const std::string run = testing::temp_dir("metadata_docs_train");
  std::string args = testing::fixture("train/parity.yaml") + " trainer.save_folder=" + run +
                     " trainer.max_steps=1 trainer.progress=false trainer.peak_tflops=0.1";
  for (const auto& o : overrides) args += " '" + o + "'";
  auto r = testing::run_tandem("train " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto metrics = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 1u);
  const double logged = metrics[0]["train/loss"].get<double>();
  EXPECT_NEAR(logged, metadata, 1e-5 * logged);
}

}  // namespace
}  // namespace tandem
