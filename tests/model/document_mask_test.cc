// Intra-document masking, as OLMo-core's long-context stage uses it (generate_doc_lengths ->
// doc_lens): documents are found as OLMo-core's get_document_lengths finds them, and the model's
// logits and gradients under the mask match a reference that masks explicitly (transformers'
// Olmo3 with a 4-D document mask and per-document positions, itself equal to each document run
// alone), on a small OLMo 3 with YaRN. Fixture: tools/make_document_mask_fixtures.py.
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/documents.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

using json = nlohmann::json;

struct Fixture {
  std::string dir = testing::fixture("model/document_mask");
  json docs = json::parse(core::read_file(dir + "/documents.json"));
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::int64_t eos = docs["eos_token_id"].get<std::int64_t>();
};

TEST(DocumentMask, DocumentsAreOlmoCoresDocLens) {
  Fixture f;
  const auto starts = model::document_starts(f.ids.data(), f.B, f.T, f.eos);
  const auto with_bos = model::document_starts(f.ids.data(), f.B, f.T, f.eos,
                                               f.docs["bos_token_id"].get<std::int64_t>());
  for (std::int64_t b = 0; b < f.B; ++b) {
    EXPECT_EQ(model::document_lengths(starts, b, f.T),
              f.docs["doc_lens"][b].get<std::vector<std::int64_t>>())
        << b;
    EXPECT_EQ(model::document_lengths(with_bos, b, f.T),
              f.docs["doc_lens_with_bos"][b].get<std::vector<std::int64_t>>())
        << b;
  }
}

TEST(DocumentMask, LogitsAndGradientsMatchAnExplicitMask) {
  Fixture f;
  auto model = model::load_model(f.dir, tandem::testing::cpu_backend());
  const auto starts = model::document_starts(f.ids.data(), f.B, f.T, f.eos);
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(f.B * f.T * V));
  model->forward_logits(f.ids.data(), f.B, f.T, logits.data(), starts.data());
  const std::vector<float> ref = io::read_npy(f.dir + "/logits.npy").as_f32();
  eval::LogitParity p = eval::compare_logits(logits, V, ref, V);
  EXPECT_LE(p.max_kl, 1e-6);
  EXPECT_LE(p.max_abs_diff, 1e-4 * p.max_ref_abs);
  EXPECT_EQ(p.top1_agreement, 1.0);
  eval::GradParity g =
      eval::compare_gradients(*model, f.ids, f.B, f.T, f.dir + "/grads.safetensors", starts.data());
  EXPECT_EQ(g.rel_l2.size(), model->layout().entries().size());
  for (const auto& [name, rel] : g.rel_l2) EXPECT_LE(rel, 1e-4) << name;

  // The same scoring through token_log_probs (evaluation's path) sees the documents too.
  std::vector<std::int64_t> positions = {5, f.T + 17, 2 * f.T + 39}, targets = {3, 11, 0};
  const std::vector<double> at =
      model->token_log_probs(f.ids.data(), f.B, f.T, positions, targets, starts.data());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const float* row = logits.data() + positions[i] * V;
    double mx = row[0], sum = 0.0;
    for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    EXPECT_NEAR(at[i], row[targets[i]] - mx - std::log(sum), 1e-5) << i;
  }

  // Without the mask the function is a different one: the test can fail.
  model->forward_logits(f.ids.data(), f.B, f.T, logits.data());
  EXPECT_GT(eval::compare_logits(logits, V, ref, V).max_kl, 1e-3);
}

TEST(DocumentMask, StartsFollowEosAndBos) {
  std::vector<std::int64_t> ids = {7, 1, 7, 7, 1, 2, 7, 1};  // EOS = 1, BOS = 2
  EXPECT_EQ(model::document_starts(ids.data(), 1, 8, 1),
            (std::vector<std::int64_t>{0, 0, 2, 2, 2, 5, 5, 5}));
  // With a BOS id only "EOS then BOS" ends a document.
  EXPECT_EQ(model::document_starts(ids.data(), 1, 8, 1, 2),
            (std::vector<std::int64_t>{0, 0, 0, 0, 0, 5, 5, 5}));
  // Two rows of 4: [7 1 | 7 7] and [1 | 2 7 1].
  const auto rows = model::document_starts(ids.data(), 2, 4, 1);
  EXPECT_EQ(model::document_lengths(rows, 0, 4), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(model::document_lengths(rows, 1, 4), (std::vector<std::int64_t>{1, 3}));
}

}  // namespace
}  // namespace tandem
