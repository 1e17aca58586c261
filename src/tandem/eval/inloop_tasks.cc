#include "tandem/eval/inloop_tasks.h"

#include <algorithm>

namespace tandem::eval {
namespace {

using Source = InLoopTask::Source;

// From olmo-eval 0.9.0's LABEL_TO_TASK_MAP (MMLU rows: category and split; MMLU's own default
// metric type is len_norm, also for its fast MC labels). tests/eval/inloop_suite_test.cc checks
// every row against the map that tools/make_inloop_eval_fixtures.py recorded.
const std::vector<InLoopTask> kTasks = {
    {"arc_challenge_test_bpb_5shot", Source::kOeEval, "arc_challenge", "test_rc_5shot",
     IclMetricType::kBpb, false},
    {"arc_challenge_test_mc_5shot_fast", Source::kOeEval, "arc_challenge", "test_mc_5shot",
     IclMetricType::kAcc, true},
    {"arc_challenge_test_rc_5shot", Source::kOeEval, "arc_challenge", "test_rc_5shot",
     IclMetricType::kLenNorm, false},
    {"arc_easy_test_bpb_5shot", Source::kOeEval, "arc_easy", "test_rc_5shot", IclMetricType::kBpb,
     false},
    {"arc_easy_test_mc_5shot_fast", Source::kOeEval, "arc_easy", "test_mc_5shot",
     IclMetricType::kAcc, true},
    {"arc_easy_test_rc_5shot", Source::kOeEval, "arc_easy", "test_rc_5shot",
     IclMetricType::kLenNorm, false},
    {"basic_skills_arithmetic_rc_5shot", Source::kOeEval, "basic_skills_arithmetic", "rc_5shot",
     IclMetricType::kAcc, false},
    {"basic_skills_coding_rc_5shot", Source::kOeEval, "basic_skills_coding", "rc_5shot",
     IclMetricType::kAcc, false},
    {"basic_skills_common_knowledge_rc_5shot", Source::kOeEval, "basic_skills_common_knowledge",
     "rc_5shot", IclMetricType::kAcc, false},
    {"basic_skills_logical_reasoning_rc_5shot", Source::kOeEval, "basic_skills_logical_reasoning",
     "rc_5shot", IclMetricType::kAcc, false},
    {"basic_skills_pattern_rc_5shot", Source::kOeEval, "basic_skills_pattern", "rc_5shot",
     IclMetricType::kAcc, false},
    {"basic_skills_string_operations_rc_5shot", Source::kOeEval, "basic_skills_string_operations",
     "rc_5shot", IclMetricType::kAcc, false},
    {"codex_humaneval_gold_bpb_3shot", Source::kOeEval, "codex_humaneval", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"codex_mbpp_gold_bpb_3shot", Source::kOeEval, "codex_mbpp", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"copycolors_10way_fast", Source::kOeEval, "copycolors", "10way", IclMetricType::kAcc, true},
    {"coqa_bpb_0shot", Source::kOeEval, "coqa", "bpb_0shot", IclMetricType::kBpb, false},
    {"csqa_val_mc_5shot_fast", Source::kOeEval, "csqa", "val_mc_5shot", IclMetricType::kAcc, true},
    {"csqa_val_rc_5shot", Source::kOeEval, "csqa", "val_rc_5shot", IclMetricType::kLenNorm, false},
    {"drop_bpb_5shot", Source::kOeEval, "drop", "bpb_5shot", IclMetricType::kBpb, false},
    {"gsm8k_gold_bpb_5shot", Source::kOeEval, "gsm8k", "gold_bpb_5shot", IclMetricType::kBpb,
     false},
    {"hellaswag_bpb_5shot", Source::kOeEval, "hellaswag", "rc_5shot", IclMetricType::kBpb, false},
    {"hellaswag_rc_5shot", Source::kOeEval, "hellaswag", "rc_5shot", IclMetricType::kLenNorm,
     false},
    {"jeopardy_bpb_5shot", Source::kOeEval, "jeopardy", "bpb_5shot", IclMetricType::kBpb, false},
    {"lab_bench_dbqa_rc_3shot", Source::kOeEval, "lab_bench_dbqa", "rc_3shot", IclMetricType::kAcc,
     false},
    {"lab_bench_protocolqa_rc_3shot", Source::kOeEval, "lab_bench_protocolqa", "rc_3shot",
     IclMetricType::kAcc, false},
    {"lambada_bpb_0shot", Source::kOeEval, "lambada", "bpb_0shot", IclMetricType::kBpb, false},
    {"medmcqa_rc_5shot", Source::kOeEval, "medmcqa", "rc_5shot", IclMetricType::kAcc, false},
    {"medqa_en_rc_5shot", Source::kOeEval, "medqa_en", "rc_5shot", IclMetricType::kAcc, false},
    {"minerva_math_500_gold_bpb_0shot", Source::kOeEval, "minerva_math_500", "gold_bpb_0shot",
     IclMetricType::kBpb, false},
    {"minerva_math_algebra_gold_bpb_0shot", Source::kOeEval, "minerva_math_algebra",
     "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_counting_and_probability_gold_bpb_0shot", Source::kOeEval,
     "minerva_math_counting_and_probability", "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_geometry_gold_bpb_0shot", Source::kOeEval, "minerva_math_geometry",
     "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_intermediate_algebra_gold_bpb_0shot", Source::kOeEval,
     "minerva_math_intermediate_algebra", "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_number_theory_gold_bpb_0shot", Source::kOeEval, "minerva_math_number_theory",
     "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_prealgebra_gold_bpb_0shot", Source::kOeEval, "minerva_math_prealgebra",
     "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"minerva_math_precalculus_gold_bpb_0shot", Source::kOeEval, "minerva_math_precalculus",
     "gold_bpb_0shot", IclMetricType::kBpb, false},
    {"mmlu_humanities_test_bpb_5shot", Source::kMmlu, "humanities", "test", IclMetricType::kBpb,
     false, false},
    {"mmlu_humanities_test_mc_5shot_fast", Source::kMmlu, "humanities", "test",
     IclMetricType::kLenNorm, true, true},
    {"mmlu_humanities_test_rc_5shot", Source::kMmlu, "humanities", "test", IclMetricType::kLenNorm,
     false, false},
    {"mmlu_humanities_val_mc_5shot_fast", Source::kMmlu, "humanities", "validation",
     IclMetricType::kLenNorm, true, true},
    {"mmlu_humanities_val_rc_5shot", Source::kMmlu, "humanities", "validation",
     IclMetricType::kLenNorm, false, false},
    {"mmlu_other_test_bpb_5shot", Source::kMmlu, "other", "test", IclMetricType::kBpb, false,
     false},
    {"mmlu_other_test_mc_5shot_fast", Source::kMmlu, "other", "test", IclMetricType::kLenNorm, true,
     true},
    {"mmlu_other_test_rc_5shot", Source::kMmlu, "other", "test", IclMetricType::kLenNorm, false,
     false},
    {"mmlu_other_val_mc_5shot_fast", Source::kMmlu, "other", "validation", IclMetricType::kLenNorm,
     true, true},
    {"mmlu_other_val_rc_5shot", Source::kMmlu, "other", "validation", IclMetricType::kLenNorm,
     false, false},
    {"mmlu_social_sciences_test_bpb_5shot", Source::kMmlu, "social_sciences", "test",
     IclMetricType::kBpb, false, false},
    {"mmlu_social_sciences_test_mc_5shot_fast", Source::kMmlu, "social_sciences", "test",
     IclMetricType::kLenNorm, true, true},
    {"mmlu_social_sciences_test_rc_5shot", Source::kMmlu, "social_sciences", "test",
     IclMetricType::kLenNorm, false, false},
    {"mmlu_social_sciences_val_mc_5shot_fast", Source::kMmlu, "social_sciences", "validation",
     IclMetricType::kLenNorm, true, true},
    {"mmlu_social_sciences_val_rc_5shot", Source::kMmlu, "social_sciences", "validation",
     IclMetricType::kLenNorm, false, false},
    {"mmlu_stem_test_bpb_5shot", Source::kMmlu, "stem", "test", IclMetricType::kBpb, false, false},
    {"mmlu_stem_test_mc_5shot_fast", Source::kMmlu, "stem", "test", IclMetricType::kLenNorm, true,
     true},
    {"mmlu_stem_test_rc_5shot", Source::kMmlu, "stem", "test", IclMetricType::kLenNorm, false,
     false},
    {"mmlu_stem_val_mc_5shot_fast", Source::kMmlu, "stem", "validation", IclMetricType::kLenNorm,
     true, true},
    {"mmlu_stem_val_rc_5shot", Source::kMmlu, "stem", "validation", IclMetricType::kLenNorm, false,
     false},
    {"mt_mbpp_bash_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_bash", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_c_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_c", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_cpp_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_cpp", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_csharp_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_csharp", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_go_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_go", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_haskell_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_haskell", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_java_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_java", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_javascript_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_javascript", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_matlab_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_matlab", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_php_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_php", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_python_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_python", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_r_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_r", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_ruby_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_ruby", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_rust_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_rust", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_scala_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_scala", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_swift_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_swift", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"mt_mbpp_typescript_gold_bpb_3shot", Source::kOeEval, "mt_mbpp_typescript", "gold_bpb_3shot",
     IclMetricType::kBpb, false},
    {"naturalqs_bpb_5shot", Source::kOeEval, "naturalqs_open", "bpb_5shot", IclMetricType::kBpb,
     false},
    {"piqa_val_mc_5shot_fast", Source::kOeEval, "piqa", "val_mc_5shot", IclMetricType::kAcc, true},
    {"piqa_val_rc_5shot", Source::kOeEval, "piqa", "val_rc_5shot", IclMetricType::kLenNorm, false},
    {"qasper_yesno_rc_5shot", Source::kOeEval, "qasper_yesno", "rc_5shot", IclMetricType::kAcc,
     false},
    {"sciriff_yesno_rc_5shot", Source::kOeEval, "sciriff_yesno", "rc_5shot", IclMetricType::kAcc,
     false},
    {"socialiqa_val_mc_5shot_fast", Source::kOeEval, "socialiqa", "val_mc_5shot",
     IclMetricType::kAcc, true},
    {"socialiqa_val_rc_5shot", Source::kOeEval, "socialiqa", "val_rc_5shot",
     IclMetricType::kLenNorm, false},
    {"squad_bpb_5shot", Source::kOeEval, "squad", "bpb_5shot", IclMetricType::kBpb, false},
    {"winogrande_val_rc_5shot", Source::kOeEval, "winogrande", "val_rc_5shot",
     IclMetricType::kLenNorm, false},
};

}  // namespace

std::string icl_metric_name(IclMetricType type) {
  switch (type) {
    case IclMetricType::kAcc:
      return "acc";
    case IclMetricType::kLenNorm:
      return "len_norm";
    case IclMetricType::kBpb:
      return "bpb";
  }
  return "?";
}

const InLoopTask* find_inloop_task(const std::string& label) {
  for (const auto& t : kTasks) {
    if (label == t.label) return &t;
  }
  return nullptr;
}

const std::vector<InLoopTask>& all_inloop_tasks() { return kTasks; }

const std::vector<std::string>& olmo3_7b_inloop_suite() {
  // OLMo-3-1025-7B-pretrain-1.py's DownstreamEvaluatorCallbackConfig(tasks=sorted([...])).
  static const std::vector<std::string> suite = [] {
    std::vector<std::string> s = {
        "arc_challenge_test_bpb_5shot",
        "arc_challenge_test_mc_5shot_fast",
        "arc_easy_test_bpb_5shot",
        "arc_easy_test_mc_5shot_fast",
        "hellaswag_bpb_5shot",
        "mmlu_humanities_test_bpb_5shot",
        "mmlu_humanities_test_mc_5shot_fast",
        "mmlu_other_test_bpb_5shot",
        "mmlu_other_test_mc_5shot_fast",
        "mmlu_social_sciences_test_bpb_5shot",
        "mmlu_social_sciences_test_mc_5shot_fast",
        "mmlu_stem_test_bpb_5shot",
        "mmlu_stem_test_mc_5shot_fast",
        "basic_skills_arithmetic_rc_5shot",
        "basic_skills_coding_rc_5shot",
        "basic_skills_common_knowledge_rc_5shot",
        "basic_skills_logical_reasoning_rc_5shot",
        "basic_skills_pattern_rc_5shot",
        "basic_skills_string_operations_rc_5shot",
        "codex_humaneval_gold_bpb_3shot",
        "codex_mbpp_gold_bpb_3shot",
        "minerva_math_500_gold_bpb_0shot",
        "mt_mbpp_cpp_gold_bpb_3shot",
        "mt_mbpp_java_gold_bpb_3shot",
        "mt_mbpp_rust_gold_bpb_3shot",
        "copycolors_10way_fast",
    };
    std::sort(s.begin(), s.end());
    return s;
  }();
  return suite;
}

}  // namespace tandem::eval
