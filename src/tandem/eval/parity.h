// Parity of our model function with a reference (HF transformers): per-token KL of the next-token
// distributions, logit differences, top-1 agreement, and per-parameter gradient errors.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/model/olmo3_model.h"

namespace tandem::eval {

struct LogitParity {
  double max_kl = 0.0;  // max over tokens of KL(ref || ours), natural log
  double mean_kl = 0.0;
  double max_abs_diff = 0.0;  // over all compared logits
  double max_ref_abs = 0.0;   // max |reference logit|, for relative thresholds
  double top1_agreement = 0.0;
  std::int64_t tokens = 0;
  std::int64_t vocab_compared = 0;
};

struct GradParity {
  std::map<std::string, double> rel_l2;  // HF parameter name -> ||ours - ref|| / ||ref||
  double max_rel_l2 = 0.0;
};

// ours[tokens, ours_vocab] vs ref[tokens, ref_vocab]; compares the first min(...) columns,
// each distribution renormalised over them. All arithmetic in double.
LogitParity compare_logits(const std::vector<float>& ours, std::int64_t ours_vocab,
                           const std::vector<float>& ref, std::int64_t ref_vocab);

// Runs HF's loss (mean next-token CE over all positions but the last of each row, no z-loss)
// backward and compares every gradient in `ref_grads_path` (HF names) with ours.
// doc_start (optional, [B*T]) applies intra-document masking as in the forward.
GradParity compare_gradients(model::Olmo3Model& model, const std::vector<std::int64_t>& ids,
                             std::int64_t B, std::int64_t T, const std::string& ref_grads_path,
                             const std::int64_t* doc_start = nullptr);

nlohmann::json parity_to_json(const LogitParity& logits, const std::optional<GradParity>& grads);

}  // namespace tandem::eval
