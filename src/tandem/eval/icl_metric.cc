#include "tandem/eval/icl_metric.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/core/utf8.h"

namespace tandem::eval {
namespace {

constexpr float kLog2OfE = 1.44269504089f;  // olmo-eval's LOG_2_OF_E, applied to float32

// Per (document, choice): the values ICLMetric.update appends, float32 as in torch.
struct Entry {
  float ll, ce, bpb, ll_ns, ce_ns, bpb_ns;
};

Entry entry_of(const IclScore& s, IclMetricType type) {
  const float sum = static_cast<float>(s.logprob);
  const auto chars = static_cast<float>(s.chars), bytes = static_cast<float>(s.bytes);
  const auto chars_ns = static_cast<float>(s.chars_no_space);
  const auto bytes_ns = static_cast<float>(s.bytes_no_space);
  // IEEE float division as torch does it: a zero length gives inf, not an error.
  Entry e;
  e.ce = -sum / chars;
  e.bpb = -sum / bytes * kLog2OfE;
  e.ce_ns = -sum / chars_ns;
  e.bpb_ns = -sum / bytes_ns * kLog2OfE;
  if (type == IclMetricType::kAcc) {
    e.ll = sum;
    e.ll_ns = sum;
  } else {
    e.ll = sum / chars;
    e.ll_ns = sum / chars_ns;
  }
  return e;
}

// torch.argmax: the first maximum (NaN counts as the maximum).
std::size_t argmax(const std::vector<float>& v) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (std::isnan(v[best])) break;
    if (std::isnan(v[i]) || v[i] > v[best]) best = i;
  }
  return best;
}

// torch.log_softmax(v)[k] in float32.
float log_softmax_at(const std::vector<float>& v, std::size_t k) {
  float max_v = -std::numeric_limits<float>::infinity();
  for (float x : v) max_v = std::max(max_v, x);
  double z = 0.0;
  for (float x : v) z += std::exp(static_cast<double>(x) - max_v);
  return static_cast<float>(static_cast<double>(v[k]) - max_v - std::log(z));
}

float softmax_at(const std::vector<float>& v, std::size_t k) {
  float max_v = -std::numeric_limits<float>::infinity();
  for (float x : v) max_v = std::max(max_v, x);
  double z = 0.0;
  for (float x : v) z += std::exp(static_cast<double>(x) - max_v);
  return static_cast<float>(std::exp(static_cast<double>(v[k]) - max_v) / z);
}

// torch.tensor(python_float): the result is float32.
double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

}  // namespace

void set_continuation_lengths(const std::string& continuation, IclScore& score) {
  std::int64_t chars = 0;
  for (unsigned char c : continuation) chars += (c & 0xC0) != 0x80;
  score.chars = chars;
  score.bytes = static_cast<std::int64_t>(continuation.size());
  score.chars_no_space = chars > 0 ? chars - 1 : 0;
  const std::size_t first =
      continuation.empty()
          ? 0
          : std::min(continuation.size(),
                     core::utf8::sequence_length(static_cast<unsigned char>(continuation[0])));
  score.bytes_no_space = static_cast<std::int64_t>(continuation.size() - first);
}

std::map<std::string, double> compute_icl_metrics(const std::vector<IclScore>& scores,
                                                  IclMetricType type) {
  // Dictionaries in first-seen order; the first entry of a (document, choice) wins.
  std::vector<std::int64_t> order;
  std::unordered_map<std::int64_t, std::int64_t> label_of;
  std::unordered_map<std::int64_t, std::vector<std::pair<std::int64_t, Entry>>> entries;
  for (const auto& s : scores) {
    auto [it, inserted] = entries.try_emplace(s.doc_id);
    if (inserted) {
      order.push_back(s.doc_id);
      label_of[s.doc_id] = s.label;
    }
    bool seen = false;
    for (const auto& [cont, _] : it->second) seen |= cont == s.cont_id;
    if (!seen) it->second.emplace_back(s.cont_id, entry_of(s, type));
  }

  std::vector<double> correct, correct_ns, ce, ce_ns, bpb, bpb_ns, soft, soft_ns, slog, slog_ns;
  float bpb_sum = 0.0f, bpb_ns_sum = 0.0f;  // the bpb type's float32 sums
  std::int64_t bpb_docs = 0;
  for (std::int64_t doc : order) {
    const auto& choices = entries.at(doc);
    const std::size_t n = choices.size();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> ll(n, -inf), ll_ns(n, -inf), c(n, inf), c_ns(n, inf), b(n, inf),
        b_ns(n, inf);
    bool skip = false;
    for (const auto& [cont, e] : choices) {
      if (cont < 0 || static_cast<std::size_t>(cont) >= n) {
        skip = true;  // IndexError in olmo-eval: not every choice was processed
        break;
      }
      const auto k = static_cast<std::size_t>(cont);
      ll[k] = e.ll;
      ll_ns[k] = e.ll_ns;
      c[k] = e.ce;
      c_ns[k] = e.ce_ns;
      b[k] = e.bpb;
      b_ns[k] = e.bpb_ns;
    }
    if (skip) continue;
    if (type == IclMetricType::kBpb) {
      bpb_sum += b[0];
      bpb_ns_sum += b_ns[0];
      ++bpb_docs;
      continue;
    }
    const std::int64_t label = label_of.at(doc);
    TANDEM_CHECK(label >= 0 && static_cast<std::size_t>(label) < n,
                 "document {}: label {} outside its {} choices", doc, label, n);
    const auto gold = static_cast<std::size_t>(label);
    correct.push_back(argmax(ll) == gold ? 1.0 : 0.0);
    correct_ns.push_back(argmax(ll_ns) == gold ? 1.0 : 0.0);
    ce.push_back(c[gold]);
    ce_ns.push_back(c_ns[gold]);
    bpb.push_back(b[gold]);
    bpb_ns.push_back(b_ns[gold]);
    soft.push_back(softmax_at(ll, gold));
    slog.push_back(log_softmax_at(ll, gold));
    soft_ns.push_back(softmax_at(ll_ns, gold));
    slog_ns.push_back(log_softmax_at(ll_ns, gold));
  }

  std::map<std::string, double> out;
  if (type == IclMetricType::kBpb) {
    TANDEM_CHECK(bpb_docs > 0, "no document to score ({} requests)", scores.size());
    const auto n = static_cast<float>(bpb_docs);
    out["bpb_v1"] = bpb_ns_sum / n;
    out["bpb_v2"] = bpb_sum / n;
    return out;
  }
  TANDEM_CHECK(!correct.empty(), "no complete document to score ({} requests)", scores.size());
  auto mean = [](const std::vector<double>& v) {
    double s = 0.0;  // Python's sum over floats, left to right
    for (double x : v) s += x;
    return f32(s / static_cast<double>(v.size()));
  };
  const std::string name = icl_metric_name(type);
  out[name + "_v1"] = mean(correct);
  out[name + "_v2"] = mean(correct);  // olmo-eval reports the same accuracy twice
  out["ce_loss_v1"] = mean(ce_ns);
  out["ce_loss_v2"] = mean(ce);
  out["bpb_v1"] = mean(bpb_ns);
  out["bpb_v2"] = mean(bpb);
  out["soft_v1"] = mean(soft_ns);
  out["soft_v2"] = mean(soft);
  out["soft_log_v1"] = mean(slog_ns);
  out["soft_log_v2"] = mean(slog);
  return out;
}

std::string olmo_core_metric_label(const std::string& key) {
  static const std::map<std::string, std::string> labels = {
      {"acc_v1", "accuracy"},       {"len_norm_v1", "length-normalized accuracy"},
      {"ce_loss_v1", "CE loss"},    {"bpb_v1", "BPB"},
      {"soft_v1", "soft loss"},     {"soft_log_v1", "log soft loss"},
      {"acc_v2", "accuracy v2"},    {"len_norm_v2", "length-normalized accuracy v2"},
      {"ce_loss_v2", "CE loss v2"}, {"bpb_v2", "BPB v2"},
      {"soft_v2", "soft loss v2"},  {"soft_log_v2", "log soft loss v2"}};
  auto it = labels.find(key);
  return it == labels.end() ? key : it->second;
}

}  // namespace tandem::eval
