#include "tandem/eval/scoring.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::eval {

std::vector<std::vector<double>> score_queries(Olmo3Model& model,
                                               const std::vector<ScoringQuery>& queries,
                                               std::int64_t batch_tokens) {
  const ModelConfig& mc = model.config();
  const std::int64_t V = mc.embedding_size;
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
  std::vector<float> logits;
  std::size_t start = 0;
  while (start < order.size()) {
    const auto T = static_cast<std::int64_t>(queries[order[start]].tokens.size());
    std::int64_t B = std::max<std::int64_t>(1, batch_tokens / T);
    B = std::min<std::int64_t>(B, static_cast<std::int64_t>(order.size() - start));
    ids.assign(static_cast<std::size_t>(B * T), 0);
    // Distinct (row, position) cells get one logits row each; targets point into them.
    std::vector<std::int64_t> positions;
    struct Target {
      std::size_t query, index, cell;
    };
    std::vector<Target> targets;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::size_t qi = order[start + static_cast<std::size_t>(b)];
      const auto& q = queries[qi];
      std::copy(q.tokens.begin(), q.tokens.end(), ids.begin() + b * T);
      std::map<std::int64_t, std::size_t> cell_of;
      for (std::size_t k = 0; k < q.targets.size(); ++k) {
        const std::int64_t pos = q.targets[k].first;
        auto [it, inserted] = cell_of.try_emplace(pos, positions.size());
        if (inserted) positions.push_back(b * T + pos);
        targets.push_back({qi, k, it->second});
      }
    }
    logits.resize(positions.size() * static_cast<std::size_t>(V));
    model.forward_logits_at(ids.data(), B, T, positions, logits.data());
    // log-sum-exp of each cell, in double.
    std::vector<double> max_of(positions.size()), lse(positions.size());
#pragma omp parallel for schedule(static)
    for (std::size_t c = 0; c < positions.size(); ++c) {
      const float* row = logits.data() + c * static_cast<std::size_t>(V);
      float max_v = row[0];
      for (std::int64_t v = 1; v < V; ++v) max_v = std::max(max_v, row[v]);
      double sum = 0.0;
      for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - max_v);
      max_of[c] = max_v;
      lse[c] = std::log(sum);
    }
    for (const auto& t : targets) {
      const float* row = logits.data() + t.cell * static_cast<std::size_t>(V);
      const std::int64_t token = queries[t.query].targets[t.index].second;
      scores[t.query][t.index] = static_cast<double>(row[token]) - max_of[t.cell] - lse[t.cell];
    }
    start += static_cast<std::size_t>(B);
  }
  return scores;
}

}  // namespace tandem::eval
