// Downstream metrics from per-request log-likelihoods, as olmo-eval's ICLMetric computes them
// (olmo_eval/metrics.py): per document, the choices' summed continuation log-probabilities
// (float32, as torch holds them), then
//   acc           argmax of the sum (first maximum wins, like torch.argmax)      [acc_raw]
//   acc_per_char  argmax of sum / characters of the continuation                [acc_per_char]
//   acc_per_token argmax of sum / tokens of the continuation (oe-eval's definition)
//   ce_loss       -sum / characters of the gold continuation, averaged over documents
//   bpb           -sum / UTF-8 bytes of the gold continuation * log2(e)         [logits_per_byte]
//   soft, soft_log  softmax / log-softmax of the sums at the gold choice
// Characters are Unicode code points (Python's len), the leading space included (OLMES; the
// "_v2" numbers of olmo-eval). A document whose choice indices are not 0..n-1 is skipped, as
// olmo-eval does. bpb-only tasks (one gold continuation per document) give ce_loss and bpb.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::eval {

struct ScoredRequest {
  std::int64_t doc_id = 0;
  std::int64_t cont_id = 0;
  std::int64_t label = 0;
  double logprob = 0.0;         // sum of log p over the continuation tokens
  std::int64_t num_tokens = 0;  // continuation tokens
  std::int64_t num_chars = 0;   // code points of the continuation string
  std::int64_t num_bytes = 0;   // UTF-8 bytes of the continuation string
};

constexpr double kLog2OfE = 1.44269504089;  // olmo-eval's LOG_2_OF_E

std::int64_t utf8_code_points(const std::string& text);

// metric name -> value, over the documents of one task.
std::map<std::string, double> compute_downstream_metrics(const std::vector<ScoredRequest>& scored,
                                                         bool bpb_only);

}  // namespace tandem::eval
