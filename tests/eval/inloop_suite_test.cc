// AI2's in-loop downstream suite against OLMo-core's own evaluator (fixture: tools/
// make_inloop_eval_fixtures.py ran DownstreamEvaluator, i.e. olmo-eval's build_task and ICLMetric,
// through EvaluatorCallback.perform_eval on a tiny OLMo-core model): every label of the OLMo 3 7B
// scripts' suite, plus one label of each other kind in OLMo-core's task groups.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "eval_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/icl_metric.h"
#include "tandem/eval/inloop_tasks.h"
#include "tandem/model/model_io.h"

namespace tandem::eval {
namespace {

std::string inloop_dir() { return test::fixtures() + "/inloop"; }

struct InloopFixture {
  nlohmann::json expected;
  std::unique_ptr<model::Olmo3Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::int64_t max_length = 0;
};

InloopFixture& inloop_fixture() {
  static InloopFixture f = [] {
    InloopFixture f;
    f.expected = nlohmann::json::parse(core::read_file(inloop_dir() + "/expected.json"));
    f.model = model::load_model(inloop_dir() + "/model", tandem::testing::cpu_backend());
    f.tokenizer = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_file(inloop_dir() + "/tokenizer.json"));
    f.max_length = f.expected.at("model_ctx_len");
    return f;
  }();
  return f;
}

DownstreamTask load(const std::string& label) {
  return load_task(inloop_dir() + "/oe_eval_tasks", parse_task_spec(label), 0,
                   inloop_dir() + "/hf_datasets");
}

std::vector<std::int64_t> encode(const std::string& text) {
  tokenizer::Encoder encoder(*inloop_fixture().tokenizer);
  std::vector<std::int64_t> out;
  for (auto id : encoder.encode(text)) out.push_back(id);
  return out;
}

std::string fnv1a(const std::vector<std::int64_t>& ids) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto id : ids) h = (h ^ static_cast<std::uint64_t>(id)) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

double rel_tol(double value, double rel) { return rel * std::max(1.0, std::fabs(value)); }

TEST(InLoopSuite, LabelTableIsOlmoEvals) {
  const auto& map = inloop_fixture().expected.at("label_map");
  EXPECT_EQ(all_inloop_tasks().size(), map.size());
  for (const auto& [label, def] : map.items()) {
    const InLoopTask* t = find_inloop_task(label);
    ASSERT_NE(t, nullptr) << label;
    const bool mmlu = def.at("class") == "MMLU";
    EXPECT_EQ(t->source == InLoopTask::Source::kMmlu, mmlu) << label;
    if (mmlu) {
      EXPECT_EQ(t->dataset, def.at("dataset_name").get<std::string>()) << label;
      EXPECT_EQ(t->variant, def.value("split", std::string("validation"))) << label;
      EXPECT_EQ(t->mc_labels, def.value("mc_labels", false)) << label;
    } else {
      EXPECT_EQ(def.at("class"), "OEEvalTask") << label;
      EXPECT_EQ(t->dataset, def.at("dataset_path").get<std::string>()) << label;
      EXPECT_EQ(t->variant, def.at("dataset_name").get<std::string>()) << label;
    }
    // MMLU's class default metric type is len_norm.
    EXPECT_EQ(icl_metric_name(t->metric_type), def.value("metric_type", std::string("len_norm")))
        << label;
    EXPECT_EQ(t->fast_mc, def.value("fast_mc", false)) << label;
  }
  EXPECT_EQ(olmo3_7b_inloop_suite(),
            inloop_fixture().expected.at("suite").get<std::vector<std::string>>());
}

TEST(InLoopSuite, FixtureCoversTheWholeSuite) {
  for (const auto& label : olmo3_7b_inloop_suite()) {
    EXPECT_TRUE(inloop_fixture().expected.at("tasks").contains(label)) << label;
  }
}

class InLoopParity : public ::testing::TestWithParam<std::string> {};

TEST_P(InLoopParity, EqualsOlmoCoreDownstreamEvaluator) {
  InloopFixture& f = inloop_fixture();
  const std::string label = GetParam();
  const auto& exp = f.expected.at("tasks").at(label);
  const auto& samples = exp.at("samples");
  DownstreamTask task = load(label);
  const InLoopTask& def = *task.spec.inloop;

  // 1. The samples olmo-eval built: same documents, choices, labels and token ids.
  std::map<std::int64_t, std::vector<std::size_t>> by_doc;  // our requests per document
  for (std::size_t i = 0; i < task.requests.size(); ++i)
    by_doc[task.requests[i].doc_id].push_back(i);
  std::vector<IclScore> from_reference;  // the reference's log-probs, our lengths
  if (def.fast_mc) {
    ASSERT_EQ(by_doc.size(), samples.size()) << label;
    for (const auto& s : samples) {
      const auto& members = by_doc.at(s.at("doc_id").get<std::int64_t>());
      const auto& first = task.requests[members.front()];
      EXPECT_EQ(encode(first.context).size(), s.at("context_len").get<std::size_t>()) << label;
      EXPECT_EQ(fnv1a(encode(first.context)), s.at("context_fnv1a")) << label;
      EXPECT_EQ(first.label, s.at("label").get<std::int64_t>()) << label;
      const auto choices = s.at("choices").get<std::vector<std::int64_t>>();
      ASSERT_EQ(members.size(), choices.size()) << label;
      for (std::size_t k = 0; k < members.size(); ++k) {
        const auto& r = task.requests[members[k]];
        EXPECT_EQ(r.cont_id, static_cast<std::int64_t>(k)) << label;
        EXPECT_EQ(encode(r.continuation), std::vector<std::int64_t>{choices[k]}) << label;
        IclScore score;
        score.doc_id = r.doc_id;
        score.cont_id = r.cont_id;
        score.label = first.label;
        score.logprob = s.at("logprobs")[k];
        set_continuation_lengths(first.continuation, score);  // fast MC: the first choice's
        from_reference.push_back(score);
      }
    }
  } else {
    ASSERT_EQ(task.requests.size(), samples.size()) << label;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      const auto& r = task.requests[i];
      EXPECT_EQ(r.doc_id, s.at("doc_id").get<std::int64_t>()) << label << " " << i;
      EXPECT_EQ(r.cont_id, s.at("cont_id").get<std::int64_t>()) << label << " " << i;
      EXPECT_EQ(r.label, s.at("label").get<std::int64_t>()) << label << " " << i;
      const auto ctx = encode(r.context);
      if (s.contains("context_ids")) {
        EXPECT_EQ(ctx, s.at("context_ids").get<std::vector<std::int64_t>>()) << label << " " << i;
      }
      EXPECT_EQ(ctx.size(), s.at("context_len").get<std::size_t>()) << label << " " << i;
      EXPECT_EQ(fnv1a(ctx), s.at("context_fnv1a")) << label << " " << i;
      const auto cont = encode(r.continuation);
      EXPECT_EQ(cont, s.at("continuation_ids").get<std::vector<std::int64_t>>())
          << label << " " << i;
      EXPECT_EQ(std::min<std::size_t>(ctx.size() + cont.size() - 1, f.max_length),
                s.at("query_len").get<std::size_t>())
          << label << " " << i;
      IclScore score;
      score.doc_id = r.doc_id;
      score.cont_id = r.cont_id;
      score.label = r.label;
      score.logprob = s.at("logprob");
      set_continuation_lengths(r.continuation, score);
      from_reference.push_back(score);
    }
  }

  // 2. Our ICLMetric on the reference's log-probabilities (isolates the metric code).
  const auto& want = exp.at("metrics");
  auto metrics = compute_icl_metrics(from_reference, def.metric_type);
  ASSERT_EQ(metrics.size(), want.size()) << label;
  for (const auto& [name, value] : want.items()) {
    ASSERT_TRUE(metrics.contains(name)) << label << " " << name;
    EXPECT_NEAR(metrics.at(name), value.get<double>(), rel_tol(value.get<double>(), 1e-5))
        << label << " " << name << " (reference log-probs)";
  }

  // 3. End to end: our model, scoring and metrics against what OLMo-core logged.
  DownstreamOptions options;
  options.tasks_dir = inloop_dir() + "/oe_eval_tasks";
  options.hf_datasets_dir = inloop_dir() + "/hf_datasets";
  options.max_length = f.max_length;
  options.batch_tokens = 2048;
  std::vector<TaskPredictions> predictions;
  auto results = evaluate_downstream(*f.model, *f.tokenizer, {task.spec}, options, &predictions);
  ASSERT_EQ(results.size(), 1u);
  for (const auto& [name, value] : want.items()) {
    EXPECT_NEAR(results[0].metrics.at(name), value.get<double>(),
                rel_tol(value.get<double>(), 1e-5))
        << label << " " << name;
  }
  // The predictions carry the log-likelihoods the metrics came from (the reference's are float32
  // sums over up to a few thousand tokens: 1e-6 relative is a few of its ulps).
  ASSERT_EQ(predictions.size(), 1u);
  ASSERT_EQ(predictions[0].requests.size(), from_reference.size());
  for (const auto& p : predictions[0].requests) {
    for (const auto& s : from_reference) {
      if (s.doc_id == p.doc_id && s.cont_id == p.cont_id) {
        EXPECT_NEAR(p.logprob, s.logprob, 1e-4 + 1e-6 * std::fabs(s.logprob))
            << label << " doc " << p.doc_id;
      }
    }
  }
}

// Read at test registration, so without the model (a missing fixture lists no labels here and
// fails FixtureCoversTheWholeSuite instead of aborting the listing).
std::vector<std::string> fixture_labels() {
  std::vector<std::string> labels;
  try {
    auto j = nlohmann::json::parse(core::read_file(inloop_dir() + "/expected.json"));
    for (const auto& [label, _] : j.at("tasks").items()) labels.push_back(label);
  } catch (const std::exception&) {
  }
  return labels;
}

INSTANTIATE_TEST_SUITE_P(Labels, InLoopParity, ::testing::ValuesIn(fixture_labels()),
                         tandem::testing::ParamName());

TEST(InLoopSuite, ArcBpbReadsTheTestSplit) {
  // AI2's label names the split: arc_*_test_bpb_5shot reads test_rc_5shot.
  for (const char* label : {"arc_easy_test_bpb_5shot", "arc_challenge_test_bpb_5shot"}) {
    TaskSpec spec = parse_task_spec(label);
    EXPECT_EQ(spec.variant_dir, "test_rc_5shot") << label;
    EXPECT_TRUE(spec.bpb) << label;
  }
}

TEST(InLoopSuite, HfDatasetsBesideTheTasksFolder) {
  EXPECT_EQ(hf_datasets_dir_for("/data/eval/oe_eval_tasks"), "/data/eval/hf_datasets");
  EXPECT_EQ(hf_datasets_dir_for("/data/eval/oe_eval_tasks/"), "/data/eval/hf_datasets");
}

TEST(InLoopSuite, SuiteGroupAndUnknownLabel) {
  auto specs = task_group_specs("olmo3-7b-in-loop");
  EXPECT_EQ(specs.size(), 26u);
  try {
    parse_task_spec("arc_easy_test_bpb_6shot");
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("arc_easy_test_bpb_6shot"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem::eval
