#include "tandem/eval/downstream_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tandem/core/error.h"

namespace tandem::eval {
namespace {

// Index of the first maximum (torch.argmax).
std::size_t first_argmax(const std::vector<float>& values) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

struct Document {
  std::int64_t label = 0;
  std::map<std::int64_t, const ScoredRequest*> choices;  // first request per cont_id wins
};

}  // namespace

std::int64_t utf8_code_points(const std::string& text) {
  std::int64_t count = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++count;
  }
  return count;
}

std::map<std::string, double> compute_downstream_metrics(const std::vector<ScoredRequest>& scored,
                                                         bool bpb_only) {
  std::vector<std::int64_t> order;  // documents in first-seen order
  std::unordered_map<std::int64_t, Document> docs;
  for (const auto& r : scored) {
    auto [it, inserted] = docs.try_emplace(r.doc_id);
    if (inserted) {
      order.push_back(r.doc_id);
      it->second.label = r.label;
    }
    it->second.choices.try_emplace(r.cont_id, &r);
  }

  double correct = 0, correct_char = 0, correct_token = 0;
  double ce_sum = 0, bpb_sum = 0, soft_sum = 0, soft_log_sum = 0;
  std::int64_t counted = 0;
  for (std::int64_t doc_id : order) {
    const Document& doc = docs.at(doc_id);
    std::size_t n = doc.choices.size();
    // olmo-eval fills a tensor of n entries by cont_id; an index past n skips the document.
    if (doc.choices.rbegin()->first >= static_cast<std::int64_t>(n) ||
        doc.choices.begin()->first < 0) {
      continue;
    }
    std::vector<float> ll(n), ll_char(n), ll_token(n), ce(n), bpb(n);
    for (const auto& [cont_id, r] : doc.choices) {
      float lp = static_cast<float>(r->logprob);
      TANDEM_CHECK(r->num_chars > 0 && r->num_bytes > 0 && r->num_tokens > 0,
                   "document {} choice {}: empty continuation", doc_id, cont_id);
      ll[cont_id] = lp;
      ll_char[cont_id] = lp / static_cast<float>(r->num_chars);
      ll_token[cont_id] = lp / static_cast<float>(r->num_tokens);
      ce[cont_id] = -lp / static_cast<float>(r->num_chars);
      bpb[cont_id] = -lp / static_cast<float>(r->num_bytes) * static_cast<float>(kLog2OfE);
    }
    std::size_t gold = 0;
    if (!bpb_only) {
      TANDEM_CHECK(doc.label >= 0 && doc.label < static_cast<std::int64_t>(n),
                   "document {}: label {} outside its {} choices", doc_id, doc.label, n);
      gold = static_cast<std::size_t>(doc.label);
      correct += first_argmax(ll) == gold;
      correct_char += first_argmax(ll_char) == gold;
      correct_token += first_argmax(ll_token) == gold;
      double max_ll = *std::max_element(ll.begin(), ll.end());
      double z = 0;
      for (float v : ll) z += std::exp(static_cast<double>(v) - max_ll);
      double log_soft = static_cast<double>(ll[gold]) - max_ll - std::log(z);
      soft_sum += std::exp(log_soft);
      soft_log_sum += log_soft;
    }
    ce_sum += ce[gold];
    bpb_sum += bpb[gold];
    ++counted;
  }
  TANDEM_CHECK(counted > 0, "no complete document to score ({} requests)", scored.size());
  double n = static_cast<double>(counted);
  std::map<std::string, double> metrics{{"ce_loss", ce_sum / n}, {"bpb", bpb_sum / n}};
  if (!bpb_only) {
    metrics["acc"] = correct / n;
    metrics["acc_per_char"] = correct_char / n;
    metrics["acc_per_token"] = correct_token / n;
    metrics["soft"] = soft_sum / n;
    metrics["soft_log"] = soft_log_sum / n;
  }
  return metrics;
}

}  // namespace tandem::eval
