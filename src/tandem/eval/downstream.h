// Downstream evaluation as ai2-olmo-eval scores it, forward only, batched, all threads busy.
//
// API for the trainer (and `tandem eval`):
//   DownstreamConfig cfg = parse_downstream_config(root_section.section("evaluation")
//                                                  .section("downstream"));
//   DownstreamSuite suite(tokenizer, cfg.tasks, cfg.options);   // loads + tokenizes once
//   if (cfg.interval > 0 && step % cfg.interval == 0) {
//     auto results = suite.evaluate(model);                      // one forward pass per batch
//     nlohmann::json line = downstream_metrics_json(results);    // "downstream/<task>/<metric>"
//   }
// or in one call: evaluate_downstream(model, tokenizer, specs, options).
//
// Scoring per request (olmo_eval/tasks.py OEEvalTask + metrics.py ICLMetric): context and
// continuation are tokenized separately without special tokens (no BOS: dolma2 has none);
// query = (ctx + cont[:-1])[-max_length:]; the score is the sum over the continuation tokens of
// log softmax(logits) at the positions that predict them (softmax over all embedding rows, as
// the model's logits span them). Metrics: downstream_metrics.h.
//
// YAML (`evaluation.downstream:`, strict keys):
//   tasks: [arc_easy:rc, hellaswag:rc, piqa:bpb]  # TASK:VARIANT or olmo-eval in-loop labels
//                      # (arc_easy_test_bpb_5shot, ...); or a group: "default" (10 OLMES tasks
//                      # x rc/mc/bpb), "olmo3-7b-in-loop" (the OLMo 3 7B scripts' suite)
//   limit: 200         # documents per task (0 = all)
//   interval: 1000     # evaluate every N steps (0 = only at the end of a stage)
//   tokenizer: ...     # tokenizer.json; default ${TANDEM_DATA_DIR:-.cache/data}/tokenizers/
//                      # allenai_dolma2.json
//   tasks_dir: ...     # default $TANDEM_EVAL_TASKS or ${TANDEM_DATA_DIR:-.cache/data}/eval/
//                      # oe_eval_tasks
//   hf_datasets_dir: ...  # MMLU's data; default: hf_datasets beside tasks_dir
//   max_length: 0      # query length cap; 0 = the run's data.sequence_length in a run config
//                      # (OLMo-core's in-loop cut), else the model's max_sequence_length
//   batch_tokens: 4096 # padded tokens per forward pass (memory: batch_tokens * vocab floats)
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/eval/downstream_metrics.h"
#include "tandem/eval/downstream_task.h"
#include "tandem/eval/eval_ranks.h"
#include "tandem/eval/predictions.h"
#include "tandem/io/config.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem::eval {

struct DownstreamOptions {
  std::string tasks_dir;        // empty: default_tasks_dir()
  std::string hf_datasets_dir;  // empty: hf_datasets_dir_for(tasks_dir)
  std::int64_t limit = 0;       // documents per task; 0 = all
  std::int64_t max_length = 0;  // 0 = model max_sequence_length
  std::int64_t batch_tokens = 4096;
};

struct DownstreamConfig {
  std::vector<TaskSpec> tasks;
  std::string tokenizer;  // tokenizer.json; empty: default_tokenizer_path()
  std::int64_t interval = 0;
  DownstreamOptions options;
};

DownstreamConfig parse_downstream_config(io::ConfigSection section);
// ${TANDEM_DATA_DIR:-.cache/data}/tokenizers/allenai_dolma2.json (scripts/fetch_data.sh).
std::string default_tokenizer_path();

struct TaskResult {
  std::string name;            // e.g. "arc_easy:rc"
  std::string primary_metric;  // e.g. "acc_per_char"
  std::map<std::string, double> metrics;
  std::int64_t documents = 0;
  std::int64_t requests = 0;
  double seconds = 0.0;  // this process's time on the task (its share of the passes)
  double primary() const { return metrics.at(primary_metric); }
};

// One request after tokenization.
struct TokenizedRequest {
  std::vector<std::int64_t> context;
  std::vector<std::int64_t> continuation;
};

// Sum of log p(continuation) for each request; requests are grouped by query length into
// batches of at most `batch_tokens` padded tokens (right padding does not change a causal
// model's earlier positions). Throws Error for an empty continuation, a token outside the
// vocabulary or a continuation longer than max_length.
std::vector<double> score_requests(model::Olmo3Model& model,
                                   const std::vector<TokenizedRequest>& requests,
                                   std::int64_t max_length, std::int64_t batch_tokens,
                                   const EvalRanks& ranks = EvalRanks());

class DownstreamSuite {
 public:
  DownstreamSuite(const tokenizer::Tokenizer& tokenizer, const std::vector<TaskSpec>& specs,
                  const DownstreamOptions& options);
  // With `predictions`, also appends every task's per-request predictions.
  // Every task's forward passes (planned task by task) shared out over `ranks` as one list
  // (eval_ranks.h: the same scores on any number of ranks); every rank returns every result.
  std::vector<TaskResult> evaluate(model::Olmo3Model& model,
                                   std::vector<TaskPredictions>* predictions = nullptr,
                                   const EvalRanks& ranks = EvalRanks()) const;
  std::int64_t total_requests() const;
  // Fails, naming the task, where some request cannot be scored by a model of this config (a
  // continuation longer than max_length, a query past the model's context): what evaluate would
  // find, said before a run trains toward its first evaluation.
  void check_fits(const model::ModelConfig& mc) const;

 private:
  struct Prepared {
    DownstreamTask task;
    std::vector<TokenizedRequest> tokens;
  };
  std::vector<Prepared> tasks_;
  DownstreamOptions options_;
};

std::vector<TaskResult> evaluate_downstream(model::Olmo3Model& model,
                                            const tokenizer::Tokenizer& tokenizer,
                                            const std::vector<TaskSpec>& specs,
                                            const DownstreamOptions& options,
                                            std::vector<TaskPredictions>* predictions = nullptr);

// {"downstream/<task>/<metric>": value, ...} for metrics.jsonl.
nlohmann::json downstream_metrics_json(const std::vector<TaskResult>& results);

}  // namespace tandem::eval
