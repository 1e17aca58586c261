// Olmo3Model::set_forward_only_token_limit: a forward-only pass (held-out loss, logits, downstream
// log-probabilities) over more rows than the limit runs in pieces of rows and gives the results
// of the whole batch (loss sums to double rounding, logits and log-probabilities to the rounding
// of GEMMs over fewer rows), without growing the activation buffers past the training
// micro-batch's, while the same passes without the limit grow them (on the CPU backend, with
// intra-document masking and a sliding window, in fp32 and bf16, with limits of several rows and
// of less than one row). Scored positions beyond one logits chunk are scored a chunk at a time.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#include "tandem/model/documents.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

constexpr std::int64_t kTrainRows = 2, kEvalRows = 5, kT = 24;

model::ModelConfig config() {
  return model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 64, n_layers: 3, n_heads: 4, n_kv_heads: 2, hidden_size: 96, "
                 "vocab_size: 100, embedding_size: 128, max_sequence_length: 64, sliding_window: "
                 "{pattern: [8, -1], force_full_attention_on_first_layer: false}}"),
      "model"));
}

// Random ids with EOS (id 0) every 9 tokens, so that rows hold several documents.
std::vector<std::int64_t> random_ids(std::int64_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> token(1, 99);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * kT));
  for (auto& id : ids) id = token(rng);
  for (std::size_t i = 5; i < ids.size(); i += 9) ids[i] = 0;
  return ids;
}

std::vector<std::int64_t> next_token_labels(const std::vector<std::int64_t>& ids) {
  std::vector<std::int64_t> labels(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    labels[i] = (i + 1) % static_cast<std::size_t>(kT) == 0 ? core::kIgnoreIndex : ids[i + 1];
  return labels;
}

struct Outcome {
  model::LossSums sums;
  std::vector<float> logits;
  std::vector<double> log_probs;
  std::int64_t held_after_training = 0, held_after_evaluation = 0;
};

// One training step's forward and backward on kTrainRows rows, then the forward-only passes on
// kEvalRows rows, with `limit` (0: none).
Outcome run(model::Precision precision, std::int64_t limit) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config(), *backend, precision);
  m.init_weights(5);
  m.set_forward_only_token_limit(limit);
  const std::vector<std::int64_t> train = random_ids(kTrainRows, 1);
  const std::vector<std::int64_t> train_labels = next_token_labels(train);
  m.forward_backward(train.data(), train_labels.data(), kTrainRows, kT, 1e-4f, 1.0f, true);
  Outcome o;
  o.held_after_training = backend->bytes_in_use();

  const std::vector<std::int64_t> ids = random_ids(kEvalRows, 2);
  const std::vector<std::int64_t> labels = next_token_labels(ids);
  const std::vector<std::int64_t> starts = model::document_starts(ids.data(), kEvalRows, kT, 0);
  o.sums = m.forward_backward(ids.data(), labels.data(), kEvalRows, kT, 1e-4f, 1.0f, false,
                              starts.data());
  o.logits.resize(static_cast<std::size_t>(kEvalRows * kT * m.config().embedding_size));
  m.forward_logits(ids.data(), kEvalRows, kT, o.logits.data(), starts.data());
  // Positions in every row, out of order (the last row's first), some twice.
  std::vector<std::int64_t> positions, targets;
  for (std::int64_t i = kEvalRows * kT - 1; i >= 0; i -= 7) positions.push_back(i);
  positions.push_back(3);
  positions.push_back(3);
  for (std::int64_t p : positions) targets.push_back((p * 13) % 100);
  o.log_probs = m.token_log_probs(ids.data(), kEvalRows, kT, positions, targets, starts.data());
  o.held_after_evaluation = backend->bytes_in_use();
  return o;
}

TEST(ForwardOnlyPieces, MatchTheWholeBatchWithoutGrowingTheActivations) {
  for (model::Precision precision : {model::Precision::kFp32, model::Precision::kBf16}) {
    const Outcome whole = run(precision, 0);
    // The passes without a limit allocate for all kEvalRows rows: the check below can tell.
    EXPECT_GT(whole.held_after_evaluation, whole.held_after_training);
    for (std::int64_t limit : {kTrainRows * kT, kT + 5, kT / 2}) {
      SCOPED_TRACE(fmt::format("{}, limit {} tokens", model::precision_name(precision), limit));
      const Outcome pieces = run(precision, limit);
      EXPECT_EQ(pieces.held_after_evaluation, pieces.held_after_training);
      EXPECT_EQ(pieces.held_after_training, whole.held_after_training);
      EXPECT_EQ(pieces.sums.count, whole.sums.count);
      EXPECT_GT(pieces.sums.count, 0);
      // Added piece by piece rather than in one run over the rows: double rounding apart.
      EXPECT_NEAR(pieces.sums.ce_sum, whole.sums.ce_sum, 1e-12 * std::abs(whole.sums.ce_sum));
      EXPECT_NEAR(pieces.sums.z_sum, whole.sums.z_sum, 1e-12 * std::abs(whole.sums.z_sum));
      EXPECT_GT(whole.sums.ce_sum, 0.0);
      // Logits and log-probabilities: to the rounding of a GEMM over fewer rows (oneDNN's sgemm
      // picks its kernel by shape). Measured here: fp32 log-probabilities 2.95e-8 apart at most,
      // every logit and every bf16 value equal. The bounds, an fp32 step (2^-23) and a bf16 step
      // (2^-8) of the largest logit, are far below what a row or position given to the wrong
      // piece would move (about 0.1 and more).
      const double step = precision == model::Precision::kFp32 ? 0x1p-23 : 0x1p-8;
      double largest = 0.0;
      for (float v : whole.logits) largest = std::max(largest, std::abs(static_cast<double>(v)));
      ASSERT_EQ(pieces.logits.size(), whole.logits.size());
      for (std::size_t i = 0; i < whole.logits.size(); ++i)
        ASSERT_NEAR(pieces.logits[i], whole.logits[i], 4 * step * largest) << "logit " << i;
      ASSERT_EQ(whole.log_probs.size(), 20u);
      ASSERT_EQ(pieces.log_probs.size(), whole.log_probs.size());
      for (std::size_t i = 0; i < whole.log_probs.size(); ++i)
        EXPECT_NEAR(pieces.log_probs[i], whole.log_probs[i], 4 * step * largest) << i;
      EXPECT_EQ(whole.log_probs[18], whole.log_probs[19]);  // position 3 twice
      EXPECT_LT(whole.log_probs.front(), 0.0);
    }
  }
}

// Downstream scoring's logits at the scored positions come at most one fused-loss chunk at a time
// (kernels/cuda/scratch_sizes.h: 1,337 rows of 100,352 fp32 logits): 1,600 positions of a model
// with OLMo 3's vocabulary, scored in one call (two chunks), give each row's own call's results.
TEST(ForwardOnlyPieces, ScoredPositionsBeyondALogitsChunkMatchRowByRow) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(
      model::parse_model_config(io::ConfigSection(
          YAML::Load("{d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 2, hidden_size: 64, "
                     "vocab_size: 100352, max_sequence_length: 64}"),
          "model")),
      *backend);
  m.init_weights(9);
  constexpr std::int64_t B = 25, T = 64;
  ASSERT_LT(kernels::cuda::logits_chunk_rows(m.config().embedding_size, 4), B * T);
  std::mt19937_64 rng(4);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T)), positions, targets;
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 100352);
  for (std::int64_t p = 0; p < B * T; ++p) {
    positions.push_back(p);
    targets.push_back(static_cast<std::int64_t>(rng() % 100352));
  }
  const std::vector<double> all = m.token_log_probs(ids.data(), B, T, positions, targets);
  ASSERT_EQ(all.size(), positions.size());
  double largest = 0.0;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<std::int64_t> row_positions(positions.begin(), positions.begin() + T);
    const std::vector<std::int64_t> row_targets(targets.begin() + b * T,
                                                targets.begin() + (b + 1) * T);
    const std::vector<double> row =
        m.token_log_probs(ids.data() + b * T, 1, T, row_positions, row_targets);
    for (std::int64_t t = 0; t < T; ++t) {
      largest = std::max(largest, std::abs(all[static_cast<std::size_t>(b * T + t)] -
                                           row[static_cast<std::size_t>(t)]));
      // GEMMs over other row counts may round differently (the first test: 3e-8 at most);
      // measured here: equal.
      ASSERT_NEAR(all[static_cast<std::size_t>(b * T + t)], row[static_cast<std::size_t>(t)], 1e-6)
          << "row " << b << ", position " << t;
    }
  }
  EXPECT_LT(all.front(), -5.0);
  std::printf("[ measured ] chunked against row by row: largest difference %.3g\n", largest);
}

TEST(ForwardOnlyPieces, BadLimitsAndPositionsAreErrors) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config(), *backend);
  EXPECT_THROW(m.set_forward_only_token_limit(-1), core::Error);
  m.set_forward_only_token_limit(kT);
  const std::vector<std::int64_t> ids = random_ids(2, 3);
  const std::vector<std::int64_t> positions{5, 2 * kT}, targets{1, 2};
  EXPECT_THROW(m.token_log_probs(ids.data(), 2, kT, positions, targets), core::Error);
}

}  // namespace
}  // namespace tandem
