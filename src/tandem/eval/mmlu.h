// MMLU requests as olmo-eval's MMLU task builds them (olmo_eval/tasks.py, class MMLU, with
// prompt_variations=2, the in-loop labels' setting): the subjects of a category in olmo-eval's
// order (categories -> subcategories -> subjects), each question of the split preceded by
// "The following are multiple choice questions (with answers) about <subject>:\n\n" and the
// subject's first 5 dev questions with their answers, then
//   rc / bpb:  "Question: <q>\nAnswer:"          continuations " <choice>"
//   mc:        "<q>\nA. ..\nB. ..\nC. ..\nD. ..\nAnswer:"  continuations " A" .. " D"
// bpb keeps only the gold continuation (label 0). Questions are str.strip()ped as Python does
// (Unicode whitespace). Data: <hf_datasets_dir>/hails/mmlu_no_train/<subject>/<split>/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/eval/downstream_task.h"

namespace tandem::eval {

struct MmluOptions {
  std::string category;  // stem, humanities, social_sciences, other
  std::string split;     // test, validation
  bool mc_labels = false;
  bool gold_only = false;  // bpb
};

// The subjects olmo-eval concatenates for a category, in its order. Throws for an unknown one.
std::vector<std::string> mmlu_subjects(const std::string& category);

// Requests in olmo-eval's order; doc ids count documents from 0. `limit_docs` > 0 keeps the
// first N documents. Errors name the folder.
std::vector<DownstreamRequest> build_mmlu_requests(const std::string& hf_datasets_dir,
                                                   const MmluOptions& options,
                                                   std::int64_t limit_docs = 0);

// Python's str.strip(): removes leading and trailing Unicode whitespace (str.isspace).
std::string python_strip(const std::string& text);

}  // namespace tandem::eval
