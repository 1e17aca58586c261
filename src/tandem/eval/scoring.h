// Log-likelihood scoring, forward only: the log-softmax of the model's logits (over every
// embedding row, as the model's logits span them) at chosen positions of chosen queries.
// Queries are sorted by length (longest first) and packed into forward passes of at most
// `batch_tokens` padded tokens; right padding leaves a causal model's earlier positions
// unchanged, so packing never changes a score.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tandem/eval/eval_ranks.h"
#include "tandem/model/olmo3_model.h"

namespace tandem::eval {

struct ScoringQuery {
  std::vector<std::int64_t> tokens;  // the model input
  // (position, token): log p(token | tokens[0..position]); positions may repeat.
  std::vector<std::pair<std::int64_t, std::int64_t>> targets;
};

// The forward passes of a set of queries, planned before any runs, so that several sets (the
// tasks of a downstream suite) can share out their passes as one list (eval_ranks.h). It refers
// to `queries`, which must outlive it. Throws Error for an empty query, a position outside its
// query or a token outside the vocabulary.
class ScoringPlan {
 public:
  ScoringPlan(const model::ModelConfig& config, const std::vector<ScoringQuery>& queries,
              std::int64_t batch_tokens);
  const std::vector<EvalBatch>& batches() const { return batches_; }
  // Pass k's log-probabilities, its queries' targets in order.
  std::vector<double> run(model::Olmo3Model& model, std::size_t k) const;
  // One log-probability per target, per query, from every pass's results.
  std::vector<std::vector<double>> scores(const std::vector<std::vector<double>>& results) const;

 private:
  const std::vector<ScoringQuery>& queries_;
  std::vector<std::size_t> order_;   // queries, longest first
  std::vector<std::size_t> starts_;  // pass k scores order_[starts_[k] .. + batches_[k].rows)
  std::vector<EvalBatch> batches_;
};

// One log-probability per target, per query, the forward passes spread over `ranks`
// (eval_ranks.h: the same scores on any number).
std::vector<std::vector<double>> score_queries(model::Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens,
                                               const EvalRanks& ranks = EvalRanks());

}  // namespace tandem::eval
