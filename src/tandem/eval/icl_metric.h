// olmo-eval's ICLMetric (olmo_eval/metrics.py, 0.9.0), the metric OLMo-core's in-loop
// DownstreamEvaluator logs: from each (document, choice)'s summed continuation log-probability,
// in float32 as torch holds it,
//   acc        log_likelihood = sum;                      argmax per document
//   len_norm   log_likelihood = sum / characters          (characters with the leading space)
//   bpb        only one (gold) continuation per document
// and for every type ce_loss = -sum / characters, bpb = -sum / UTF-8 bytes * log2(e), each also
// "_no_leading_space" (the first character dropped from the counts). compute() gives
//   acc / len_norm:  <type>_v1 = <type>_v2 (accuracy), ce_loss_v1/v2, bpb_v1/v2, soft_v1/v2 and
//                    soft_log_v1/v2 (softmax / log-softmax of the documents' log_likelihoods at
//                    the gold choice); v1 = no leading space, v2 = OLMES (leading space counted)
//   bpb:             bpb_v1, bpb_v2 (summed in float32, as olmo-eval sums 0-d float32 tensors)
// Document order, first-entry-wins for repeated (document, choice) pairs and documents skipped
// when a choice index reaches past their number of choices follow olmo-eval.
// OLMo-core records each as "eval/downstream/<label> (<name>)", e.g. "(BPB v2)".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/eval/inloop_tasks.h"

namespace tandem::eval {

struct IclScore {
  std::int64_t doc_id = 0;
  std::int64_t cont_id = 0;
  std::int64_t label = 0;
  double logprob = 0.0;                                 // summed log p of the continuation tokens
  std::int64_t chars = 0, bytes = 0;                    // of the continuation string
  std::int64_t chars_no_space = 0, bytes_no_space = 0;  // without its first character
};

// Lengths of a continuation as olmo-eval counts them (code points and UTF-8 bytes, with and
// without the first character).
void set_continuation_lengths(const std::string& continuation, IclScore& score);

std::map<std::string, double> compute_icl_metrics(const std::vector<IclScore>& scores,
                                                  IclMetricType type);

// OLMo-core's display name of a metric key ("bpb_v2" -> "BPB v2").
std::string olmo_core_metric_label(const std::string& key);

}  // namespace tandem::eval
