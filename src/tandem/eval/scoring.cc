#include "tandem/eval/scoring.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::eval {

ScoringPlan::ScoringPlan(const model::ModelConfig& mc, const std::vector<ScoringQuery>& queries,
                         std::int64_t batch_tokens)
    : queries_(queries) {
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const auto& q = queries[i];
    const auto T = static_cast<std::int64_t>(q.tokens.size());
    TANDEM_CHECK(T >= 1, "query {}: no tokens", i);
    TANDEM_CHECK(T <= mc.max_sequence_length,
                 "query {}: {} tokens exceed the model's max_sequence_length {}", i, T,
                 mc.max_sequence_length);
    for (std::int64_t id : q.tokens) {
      TANDEM_CHECK(id >= 0 && id < mc.vocab_size, "query {}: token {} outside the vocabulary ({})",
                   i, id, mc.vocab_size);
    }
    for (const auto& [pos, token] : q.targets) {
      TANDEM_CHECK(pos >= 0 && pos < T, "query {}: position {} outside its {} tokens", i, pos, T);
      TANDEM_CHECK(token >= 0 && token < mc.vocab_size,
                   "query {}: target token {} outside the vocabulary ({})", i, token,
                   mc.vocab_size);
    }
  }
  order_.resize(queries.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
    return queries[a].tokens.size() > queries[b].tokens.size();
  });
  // The passes: runs of the sorted queries, each padded to its longest (first) query.
  for (std::size_t start = 0; start < order_.size();) {
    const auto T = static_cast<std::int64_t>(queries[order_[start]].tokens.size());
    std::int64_t B = std::max<std::int64_t>(1, batch_tokens / T);
    B = std::min<std::int64_t>(B, static_cast<std::int64_t>(order_.size() - start));
    std::size_t targets = 0;
    for (std::int64_t b = 0; b < B; ++b)
      targets += queries[order_[start + static_cast<std::size_t>(b)]].targets.size();
    starts_.push_back(start);
    batches_.push_back({B, T, targets});
    start += static_cast<std::size_t>(B);
  }
}

std::vector<double> ScoringPlan::run(model::Olmo3Model& model, std::size_t k) const {
  const std::int64_t B = batches_[k].rows, T = batches_[k].tokens;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T), 0);
  // One log-probability per target; the lm_head and its log-softmax run at those positions only
  // (model::Olmo3Model::token_log_probs).
  std::vector<std::int64_t> positions, tokens;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& q = queries_[order_[starts_[k] + static_cast<std::size_t>(b)]];
    std::copy(q.tokens.begin(), q.tokens.end(), ids.begin() + b * T);
    for (const auto& [pos, token] : q.targets) {
      positions.push_back(b * T + pos);
      tokens.push_back(token);
    }
  }
  return model.token_log_probs(ids.data(), B, T, positions, tokens);
}

std::vector<std::vector<double>> ScoringPlan::scores(
    const std::vector<std::vector<double>>& results) const {
  TANDEM_CHECK(results.size() == batches_.size(), "scoring: {} passes' results for {} passes",
               results.size(), batches_.size());
  std::vector<std::vector<double>> out(queries_.size());
  for (std::size_t k = 0; k < batches_.size(); ++k) {
    std::size_t next = 0;
    for (std::int64_t b = 0; b < batches_[k].rows; ++b) {
      const std::size_t qi = order_[starts_[k] + static_cast<std::size_t>(b)];
      const std::size_t n = queries_[qi].targets.size();
      out[qi].assign(results[k].begin() + static_cast<std::ptrdiff_t>(next),
                     results[k].begin() + static_cast<std::ptrdiff_t>(next + n));
      next += n;
    }
  }
  return out;
}

std::vector<std::vector<double>> score_queries(model::Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens, const EvalRanks& ranks) {
  const ScoringPlan plan(model.config(), queries, batch_tokens);
  return plan.scores(
      ranks.run(model, plan.batches(), [&](std::size_t k) { return plan.run(model, k); }));
}

}  // namespace tandem::eval
