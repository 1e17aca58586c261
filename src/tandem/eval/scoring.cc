#include "tandem/eval/scoring.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::eval {

std::vector<std::vector<double>> score_queries(model::Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens) {
  const model::ModelConfig& mc = model.config();
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

  std::vector<std::size_t> order(queries.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return queries[a].tokens.size() > queries[b].tokens.size();
  });

  std::vector<std::vector<double>> scores(queries.size());
  for (std::size_t i = 0; i < queries.size(); ++i) scores[i].resize(queries[i].targets.size());
  std::vector<std::int64_t> ids;
  std::size_t start = 0;
  while (start < order.size()) {
    const auto T = static_cast<std::int64_t>(queries[order[start]].tokens.size());
    std::int64_t B = std::max<std::int64_t>(1, batch_tokens / T);
    B = std::min<std::int64_t>(B, static_cast<std::int64_t>(order.size() - start));
    ids.assign(static_cast<std::size_t>(B * T), 0);
    // One log-probability per target; the lm_head and its log-softmax run at those positions
    // only (model::Olmo3Model::token_log_probs).
    std::vector<std::int64_t> positions, tokens;
    std::vector<std::pair<std::size_t, std::size_t>> owner;  // (query, target index)
    for (std::int64_t b = 0; b < B; ++b) {
      const std::size_t qi = order[start + static_cast<std::size_t>(b)];
      const auto& q = queries[qi];
      std::copy(q.tokens.begin(), q.tokens.end(), ids.begin() + b * T);
      for (std::size_t k = 0; k < q.targets.size(); ++k) {
        positions.push_back(b * T + q.targets[k].first);
        tokens.push_back(q.targets[k].second);
        owner.emplace_back(qi, k);
      }
    }
    const std::vector<double> logp = model.token_log_probs(ids.data(), B, T, positions, tokens);
    for (std::size_t k = 0; k < logp.size(); ++k) scores[owner[k].first][owner[k].second] = logp[k];
    start += static_cast<std::size_t>(B);
  }
  return scores;
}

}  // namespace tandem::eval
