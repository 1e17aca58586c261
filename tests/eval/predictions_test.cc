// `tandem eval --predictions FILE`: one OLMES-style line per document with every request's
// continuation log-likelihood and counts, enough to recompute the reported metrics from the file
// alone; and the metrics themselves equal what OLMo-core's evaluator logged on the same fixture.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "eval_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/icl_metric.h"
#include "tandem/eval/inloop_tasks.h"

namespace tandem::eval {
namespace {

TEST(EvalPredictions, RecomputeEveryMetricFromTheFile) {
  const std::string f = test::fixtures() + "/inloop";
  const std::string out_dir = tandem::testing::temp_dir("eval_predictions");
  const std::string pred = out_dir + "/predictions.jsonl";
  const std::vector<std::string> labels = {"copycolors_10way_fast", "arc_easy_test_bpb_5shot",
                                           "mmlu_stem_test_mc_5shot_fast",
                                           "basic_skills_coding_rc_5shot"};
  std::string tasks;
  for (const auto& l : labels) tasks += (tasks.empty() ? "" : ",") + l;
  auto r = tandem::testing::run_tandem(
      "eval --checkpoint " + f + "/model --tokenizer " + f + "/tokenizer.json --tasks-dir " + f +
      "/oe_eval_tasks --hf-datasets-dir " + f + "/hf_datasets --max-length 512 --tasks " + tasks +
      " --predictions " + pred + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  auto expected = nlohmann::json::parse(core::read_file(f + "/expected.json"));

  // Group the file's lines by task.
  std::map<std::string, std::vector<nlohmann::json>> docs;
  std::ifstream in(pred);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* key : {"task", "doc_id", "label", "model_output"}) {
      ASSERT_TRUE(j.contains(key)) << key << " in " << line;
    }
    docs[j["task"]].push_back(j);
  }
  for (const auto& label : labels) {
    SCOPED_TRACE(label);
    const InLoopTask* t = find_inloop_task(label);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(docs.contains(label));
    EXPECT_EQ(static_cast<std::int64_t>(docs[label].size()),
              report["downstream"][label]["documents"].get<std::int64_t>());
    std::vector<IclScore> scores;
    for (const auto& d : docs[label]) {
      // Fast MC normalises every choice by the first choice's length (olmo-eval).
      const std::string first = d["model_output"][0]["continuation"];
      for (const auto& o : d["model_output"]) {
        for (const char* key : {"idx", "continuation", "sum_logits", "num_tokens", "num_tokens_all",
                                "num_chars", "num_bytes", "bits_per_byte"}) {
          ASSERT_TRUE(o.contains(key)) << key;
        }
        IclScore s;
        s.doc_id = d["doc_id"];
        s.cont_id = o["idx"];
        s.label = d["label"];
        s.logprob = o["sum_logits"];
        set_continuation_lengths(t->fast_mc ? first : o["continuation"].get<std::string>(), s);
        EXPECT_NEAR(o["bits_per_byte"].get<double>(),
                    -s.logprob / o["num_bytes"].get<double>() * 1.44269504089, 1e-9);
        scores.push_back(s);
      }
    }
    auto recomputed = compute_icl_metrics(scores, t->metric_type);
    const auto& reported = report["downstream"][label]["metrics"];
    const auto& olmo_core = expected["tasks"][label]["metrics"];
    ASSERT_EQ(recomputed.size(), reported.size());
    for (const auto& [name, value] : recomputed) {
      EXPECT_NEAR(value, reported[name].get<double>(), 1e-6 * std::max(1.0, std::fabs(value)))
          << name;
      EXPECT_NEAR(value, olmo_core[name].get<double>(), 1e-5 * std::max(1.0, std::fabs(value)))
          << name << " vs OLMo-core";
    }
  }
}

}  // namespace
}  // namespace tandem::eval
