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

// A position whose top token differs from the reference's is a near tie when the reference's own
// logits for the two tokens are within this share of its largest |logit|: fp32 rounding decides
// it. Measured against OLMo-core's fp32 forward (tools/check_olmo_core_model_random.py, seeds
// 9101-9105, 100 cases): our largest |logit - reference| is 1.2e-6 of the largest |logit| at the
// median case, 9.1e-6 at the worst, and one flip (seed 7302) sat at a gap of 3.8e-7; a flip
// beyond this margin needs the two logits 5e-5 of the largest |logit| off each.
inline constexpr double kTop1TieMargin = 1e-4;

struct LogitParity {
  double max_kl = 0.0;  // max over tokens of KL(ref || ours), natural log
  double mean_kl = 0.0;
  double max_abs_diff = 0.0;  // over all compared logits
  double max_ref_abs = 0.0;   // max |reference logit|, for relative thresholds
  double top1_agreement = 0.0;
  // The tokens whose top token differs, split by the reference's gap between the two tokens: at
  // most kTop1TieMargin of max_ref_abs, or more (every one, when the reference is all zeros).
  std::int64_t top1_near_ties = 0;
  std::int64_t top1_flips = 0;
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
