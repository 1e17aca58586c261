#include "tandem/eval/parity.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_io.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem::eval {
namespace {

// log-softmax of the first n entries of row, in double.
std::vector<double> log_softmax(const float* row, std::int64_t n) {
  double mx = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(row[i]));
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(row[i]) - lse;
  return out;
}

std::int64_t argmax(const float* row, std::int64_t n) {
  return std::max_element(row, row + n) - row;
}

}  // namespace

LogitParity compare_logits(const std::vector<float>& ours, std::int64_t ours_vocab,
                           const std::vector<float>& ref, std::int64_t ref_vocab) {
  TANDEM_CHECK(ours_vocab > 0 && ref_vocab > 0, "empty vocabulary in parity comparison");
  // A comparison that cannot fail is not a pass: one column has KL 0 whatever the logits, and
  // no tokens or NaN logits (NaN loses every max()) would report perfect agreement.
  TANDEM_CHECK(ref_vocab >= 2,
               "parity: the reference has {} vocabulary column(s); a softmax over "
               "fewer than 2 is constant, so nothing would be compared",
               ref_vocab);
  TANDEM_CHECK(ref.size() % static_cast<std::size_t>(ref_vocab) == 0 &&
                   ours.size() % static_cast<std::size_t>(ours_vocab) == 0,
               "parity: logits are not whole rows ({} reference values for {} columns, {} of ours "
               "for {})",
               ref.size(), ref_vocab, ours.size(), ours_vocab);
  const std::int64_t tokens = static_cast<std::int64_t>(ref.size()) / ref_vocab;
  TANDEM_CHECK(tokens > 0, "parity: the reference holds no tokens");
  TANDEM_CHECK(static_cast<std::int64_t>(ours.size()) / ours_vocab == tokens,
               "parity: {} reference tokens but {} of ours", tokens,
               static_cast<std::int64_t>(ours.size()) / ours_vocab);
  for (std::size_t i = 0; i < ref.size(); ++i)
    TANDEM_CHECK(std::isfinite(ref[i]), "parity: reference logit {} (token {}, column {}) is {}", i,
                 i / static_cast<std::size_t>(ref_vocab), i % static_cast<std::size_t>(ref_vocab),
                 ref[i]);
  for (std::size_t i = 0; i < ours.size(); ++i)
    TANDEM_CHECK(std::isfinite(ours[i]), "parity: our logit {} (token {}, column {}) is {}", i,
                 i / static_cast<std::size_t>(ours_vocab), i % static_cast<std::size_t>(ours_vocab),
                 ours[i]);
  const std::int64_t V = std::min(ours_vocab, ref_vocab);
  LogitParity p;
  p.tokens = tokens;
  p.vocab_compared = V;
  double kl_sum = 0.0;
  std::int64_t agree = 0;
  // The reference's gap at each top-1 disagreement, judged once its largest |logit| is known.
  std::vector<double> disagreement_gaps;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* o = ours.data() + t * ours_vocab;
    const float* r = ref.data() + t * ref_vocab;
    for (std::int64_t i = 0; i < V; ++i) {
      p.max_abs_diff = std::max(p.max_abs_diff, std::fabs(static_cast<double>(o[i]) - r[i]));
      p.max_ref_abs = std::max(p.max_ref_abs, std::fabs(static_cast<double>(r[i])));
    }
    std::vector<double> lo = log_softmax(o, V), lr = log_softmax(r, V);
    double kl = 0.0;
    for (std::int64_t i = 0; i < V; ++i) kl += std::exp(lr[i]) * (lr[i] - lo[i]);
    kl = std::max(kl, 0.0);  // tiny negative values are rounding
    p.max_kl = std::max(p.max_kl, kl);
    kl_sum += kl;
    const std::int64_t top_ours = argmax(o, V), top_ref = argmax(r, V);
    if (top_ours == top_ref)
      ++agree;
    else
      disagreement_gaps.push_back(static_cast<double>(r[top_ref]) - r[top_ours]);
  }
  for (double gap : disagreement_gaps) {
    const bool near_tie = p.max_ref_abs > 0 && gap / p.max_ref_abs <= kTop1TieMargin;
    ++(near_tie ? p.top1_near_ties : p.top1_flips);
  }
  p.mean_kl = tokens ? kl_sum / static_cast<double>(tokens) : 0.0;
  p.top1_agreement = tokens ? static_cast<double>(agree) / static_cast<double>(tokens) : 0.0;
  return p;
}

GradParity compare_gradients(model::Olmo3Model& model, const std::vector<std::int64_t>& ids,
                             std::int64_t B, std::int64_t T, const std::string& ref_grads_path,
                             const std::int64_t* doc_start) {
  std::vector<std::int64_t> labels = optim::make_labels(ids.data(), B, T, nullptr);
  const std::int64_t count = optim::loss_divisor(labels.data(), B, T, nullptr);
  TANDEM_CHECK(count > 0, "parity: no labels (sequence length must be at least 2)");
  model.zero_grads();
  model.forward_backward(ids.data(), labels.data(), B, T, 0.0f, 1.0f / static_cast<float>(count),
                         true, doc_start);
  io::SafetensorsCheckpoint ref(ref_grads_path);
  const std::vector<float> grads = model.grads_to_host();
  GradParity g;
  for (const model::ParameterEntry& e : model.layout().entries()) {
    const std::string hf = model::hf_name_of(e.name);
    TANDEM_CHECK(ref.has(hf), "{}: no reference gradient for '{}'", ref_grads_path, hf);
    // The reference's shape is HF's: ours, with the vocabulary rows cut to vocab_size.
    std::vector<std::int64_t> expected = e.shape;
    if (e.name == "embeddings.weight" || e.name == "lm_head.w_out.weight")
      expected[0] = model.config().vocab_size;
    TANDEM_CHECK(ref.info(hf).shape == expected,
                 "{}: reference gradient '{}' has shape [{}], expected [{}]", ref_grads_path, hf,
                 fmt::join(ref.info(hf).shape, ", "), fmt::join(expected, ", "));
    std::vector<float> r = ref.read_f32(hf);
    const float* ours = grads.data() + e.offset;
    for (std::size_t i = 0; i < r.size(); ++i)
      TANDEM_CHECK(std::isfinite(r[i]) && std::isfinite(ours[i]),
                   "{}: gradient '{}' element {} is not finite (reference {}, ours {})",
                   ref_grads_path, hf, i, r[i], ours[i]);
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < r.size(); ++i) {  // padded vocab rows, if any, are past the end
      double dlt = static_cast<double>(ours[i]) - r[i];
      diff += dlt * dlt;
      norm += static_cast<double>(r[i]) * r[i];
    }
    double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    g.rel_l2[hf] = rel;
    g.max_rel_l2 = std::max(g.max_rel_l2, rel);
  }
  return g;
}

nlohmann::json parity_to_json(const LogitParity& p, const std::optional<GradParity>& grads) {
  nlohmann::json j;
  j["max_kl"] = p.max_kl;
  j["mean_kl"] = p.mean_kl;
  j["max_abs_diff"] = p.max_abs_diff;
  j["max_ref_abs"] = p.max_ref_abs;
  j["top1_agreement"] = p.top1_agreement;
  j["top1_near_ties"] = p.top1_near_ties;
  j["top1_flips"] = p.top1_flips;
  j["tokens"] = p.tokens;
  j["vocab_compared"] = p.vocab_compared;
  if (grads) {
    j["grads"] = grads->rel_l2;
    j["max_grad_rel_l2"] = grads->max_rel_l2;
  }
  return j;
}

}  // namespace tandem::eval
