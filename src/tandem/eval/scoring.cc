#include "tandem/eval/scoring.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::eval {

std::vector<std::vector<double>> score_queries(model::Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens, const EvalRanks& ranks) {
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

  // The passes: runs of the sorted queries, each padded to its longest (first) query.
  std::vector<std::size_t> starts;
  std::vector<EvalBatch> batches;
  for (std::size_t start = 0; start < order.size();) {
    const auto T = static_cast<std::int64_t>(queries[order[start]].tokens.size());
    std::int64_t B = std::max<std::int64_t>(1, batch_tokens / T);
    B = std::min<std::int64_t>(B, static_cast<std::int64_t>(order.size() - start));
    std::size_t targets = 0;
    for (std::int64_t b = 0; b < B; ++b)
      targets += queries[order[start + static_cast<std::size_t>(b)]].targets.size();
    starts.push_back(start);
    batches.push_back({B, T, targets});
    start += static_cast<std::size_t>(B);
  }
  auto run_batch = [&](std::size_t k) {
    const std::int64_t B = batches[k].rows, T = batches[k].tokens;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T), 0);
    // One log-probability per target; the lm_head and its log-softmax run at those positions
    // only (model::Olmo3Model::token_log_probs).
    std::vector<std::int64_t> positions, tokens;
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& q = queries[order[starts[k] + static_cast<std::size_t>(b)]];
      std::copy(q.tokens.begin(), q.tokens.end(), ids.begin() + b * T);
      for (const auto& [pos, token] : q.targets) {
        positions.push_back(b * T + pos);
        tokens.push_back(token);
      }
    }
    return model.token_log_probs(ids.data(), B, T, positions, tokens);
  };
  const std::vector<std::vector<double>> logp = ranks.run(model, batches, run_batch);

  std::vector<std::vector<double>> scores(queries.size());
  for (std::size_t k = 0; k < batches.size(); ++k) {
    std::size_t next = 0;
    for (std::int64_t b = 0; b < batches[k].rows; ++b) {
      const std::size_t qi = order[starts[k] + static_cast<std::size_t>(b)];
      const std::size_t n = queries[qi].targets.size();
      scores[qi].assign(logp[k].begin() + static_cast<std::ptrdiff_t>(next),
                        logp[k].begin() + static_cast<std::ptrdiff_t>(next + n));
      next += n;
    }
  }
  return scores;
}

}  // namespace tandem::eval
