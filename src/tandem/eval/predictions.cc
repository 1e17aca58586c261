#include "tandem/eval/predictions.h"

#include <map>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"

namespace tandem::eval {

void write_predictions_jsonl(const std::string& path, const std::vector<TaskPredictions>& tasks) {
  constexpr double kLog2OfE = 1.44269504089;
  std::string out;
  for (const auto& t : tasks) {
    // Documents in first-seen order, their choices in request order.
    std::vector<std::int64_t> order;
    std::map<std::int64_t, nlohmann::json> docs;
    for (const auto& r : t.requests) {
      auto [it, inserted] = docs.try_emplace(r.doc_id);
      if (inserted) {
        order.push_back(r.doc_id);
        it->second = {{"task", t.task},
                      {"doc_id", r.doc_id},
                      {"label", r.label},
                      {"model_output", nlohmann::json::array()}};
      }
      it->second["model_output"].push_back(
          {{"idx", r.cont_id},
           {"continuation", r.continuation},
           {"sum_logits", r.logprob},
           {"num_tokens", r.num_tokens},
           {"num_tokens_all", r.context_tokens + r.num_tokens},
           {"num_tokens_query", r.query_tokens},
           {"num_chars", r.num_chars},
           {"num_bytes", r.num_bytes},
           {"logits_per_token", r.logprob / static_cast<double>(r.num_tokens)},
           {"logits_per_char", r.logprob / static_cast<double>(r.num_chars)},
           {"bits_per_byte", -r.logprob / static_cast<double>(r.num_bytes) * kLog2OfE}});
    }
    for (std::int64_t d : order) out += docs.at(d).dump() + "\n";
  }
  core::write_file_atomic(path, out);
}

}  // namespace tandem::eval
