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

// One log-probability per target, per query, the forward passes spread over `ranks`
// (eval_ranks.h: the same scores on any number). Throws Error for an empty query, a position
// outside its query or a token outside the vocabulary.
std::vector<std::vector<double>> score_queries(model::Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens,
                                               const EvalRanks& ranks = EvalRanks());

}  // namespace tandem::eval
