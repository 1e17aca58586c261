// Per-request predictions, written as OLMES writes its predictions file (one JSON line per
// document, its choices under "model_output"), so that a third party can recompute every
// downstream figure from them:
//   {"task": "arc_easy_test_mc_5shot_fast", "doc_id": 0, "label": 2,
//    "model_output": [{"idx": 0, "continuation": " A", "sum_logits": -2.31, "num_tokens": 1,
//                      "num_tokens_all": 412, "num_chars": 2, "num_bytes": 2,
//                      "logits_per_token": ..., "logits_per_char": ..., "bits_per_byte": ...},
//                     ...]}
// sum_logits is the continuation's summed log-probability (natural log); num_tokens_all the
// tokens of context + continuation; num_tokens_query the model input actually scored (after the
// left truncation to max_length); bits_per_byte = -sum_logits / num_bytes * log2(e).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::eval {

struct RequestPrediction {
  std::int64_t doc_id = 0;
  std::int64_t cont_id = 0;
  std::int64_t label = 0;
  std::string continuation;
  double logprob = 0.0;
  std::int64_t num_tokens = 0;      // continuation tokens scored
  std::int64_t context_tokens = 0;  // before truncation
  std::int64_t query_tokens = 0;    // model input
  std::int64_t num_chars = 0, num_bytes = 0;
};

struct TaskPredictions {
  std::string task;
  std::vector<RequestPrediction> requests;
};

// Appends one line per document of every task to `path` (written atomically as a whole).
void write_predictions_jsonl(const std::string& path, const std::vector<TaskPredictions>& tasks);

}  // namespace tandem::eval
