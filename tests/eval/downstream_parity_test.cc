// Parity with the real references (fixtures from tools/make_eval_fixtures.py): olmo-eval's own
// token ids and query lengths, HF transformers' per-request log-likelihoods (fp32) and
// olmo-eval's ICLMetric values on the same requests.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "eval_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/downstream.h"
#include "tandem/model/model_io.h"

namespace tandem::eval {
namespace {

struct DownstreamFixture {
  nlohmann::json expected;
  std::unique_ptr<model::Olmo3Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

DownstreamFixture& downstream_fixture() {
  static DownstreamFixture f = [] {
    DownstreamFixture f;
    f.expected = nlohmann::json::parse(core::read_file(test::fixtures() + "/expected.json"));
    f.model = model::load_model(test::fixtures() + "/model", tandem::testing::cpu_backend());
    f.tokenizer = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_file(test::fixtures() + "/tokenizer.json"));
    return f;
  }();
  return f;
}

std::vector<TokenizedRequest> tokenize(const DownstreamTask& task) {
  tokenizer::Encoder encoder(*downstream_fixture().tokenizer);
  std::vector<TokenizedRequest> out;
  for (const auto& r : task.requests) {
    TokenizedRequest t;
    for (auto id : encoder.encode(r.context)) t.context.push_back(id);
    for (auto id : encoder.encode(r.continuation)) t.continuation.push_back(id);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<ScoredRequest> scored_from(const DownstreamTask& task,
                                       const std::vector<TokenizedRequest>& tokens,
                                       const std::vector<double>& logp) {
  std::vector<ScoredRequest> s;
  for (std::size_t i = 0; i < task.requests.size(); ++i) {
    const auto& r = task.requests[i];
    s.push_back({r.doc_id, r.cont_id, r.label, logp[i],
                 static_cast<std::int64_t>(tokens[i].continuation.size()),
                 utf8_code_points(r.continuation),
                 static_cast<std::int64_t>(r.continuation.size())});
  }
  return s;
}

class DownstreamParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DownstreamParity, MatchesOlmoEvalAndTransformers) {
  DownstreamFixture& f = downstream_fixture();
  const auto& exp = f.expected.at("tasks").at(GetParam());
  const std::int64_t max_len = f.expected.at("model_ctx_len");
  DownstreamTask task = load_task(test::tasks_dir(), parse_task_spec(GetParam()));
  const auto& reqs = exp.at("requests");
  ASSERT_EQ(task.requests.size(), reqs.size());
  auto tokens = tokenize(task);

  // Token ids and request identity as olmo-eval prepared them.
  std::vector<double> hf_logp;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(task.requests[i].doc_id, reqs[i].at("doc_id").get<std::int64_t>()) << i;
    EXPECT_EQ(task.requests[i].cont_id, reqs[i].at("cont_id").get<std::int64_t>()) << i;
    EXPECT_EQ(task.requests[i].label, reqs[i].at("label").get<std::int64_t>()) << i;
    EXPECT_EQ(tokens[i].context, reqs[i].at("context_ids").get<std::vector<std::int64_t>>()) << i;
    EXPECT_EQ(tokens[i].continuation,
              reqs[i].at("continuation_ids").get<std::vector<std::int64_t>>())
        << i;
    hf_logp.push_back(reqs[i].at("logprob").get<double>());
  }

  // Per-request log-likelihoods: HF transformers fp32 vs ours, within 1e-4 (fp32 summation order
  // differs; the sums run over up to a few hundred tokens).
  // One request per forward pass, and several of different lengths per pass.
  for (std::int64_t batch_tokens : {std::int64_t{1}, std::int64_t{700}}) {
    if (batch_tokens == 1 && GetParam() != "winogrande:rc") continue;  // keeps the test short
    std::vector<double> ours = score_requests(*f.model, tokens, max_len, batch_tokens);
    for (std::size_t i = 0; i < ours.size(); ++i) {
      EXPECT_NEAR(ours[i], hf_logp[i], 1e-4) << GetParam() << " request " << i;
    }
  }

  // olmo-eval's metric code on the HF log-likelihoods vs our metric code on the same numbers.
  bool bpb_only = task.spec.bpb;
  auto from_hf = compute_downstream_metrics(scored_from(task, tokens, hf_logp), bpb_only);
  const auto& exp_metrics = exp.at("metrics");
  for (const auto& [name, value] : exp_metrics.items()) {
    ASSERT_TRUE(from_hf.contains(name)) << name;
    EXPECT_NEAR(from_hf.at(name), value.get<double>(),
                1e-5 * std::max(1.0, std::fabs(value.get<double>())))
        << GetParam() << " " << name;
  }
  // End to end: our model, our scoring, our metrics.
  DownstreamOptions options;
  options.tasks_dir = test::tasks_dir();
  options.max_length = max_len;
  options.batch_tokens = 1024;
  auto results = evaluate_downstream(*f.model, *f.tokenizer, {task.spec}, options);
  ASSERT_EQ(results.size(), 1u);
  for (const auto& [name, value] : exp_metrics.items()) {
    // Accuracies are counts: equal up to olmo-eval's float32 result tensor (1e-6).
    double tol =
        name.starts_with("acc") ? 1e-6 : 1e-4 * std::max(1.0, std::fabs(value.get<double>()));
    EXPECT_NEAR(results[0].metrics.at(name), value.get<double>(), tol) << GetParam() << " " << name;
  }
  EXPECT_EQ(results[0].requests, static_cast<std::int64_t>(reqs.size()));
}

INSTANTIATE_TEST_SUITE_P(Tasks, DownstreamParity,
                         ::testing::Values("arc_easy:rc", "hellaswag:rc", "winogrande:rc",
                                           "arc_challenge:mc", "csqa:rc_0shot", "piqa:bpb"),
                         tandem::testing::ParamName());

TEST(DownstreamParity, QueriesAreTruncatedFromTheLeft) {
  // The 5-shot contexts are longer than the fixture's 256-token window: olmo-eval's query
  // lengths (recorded) must equal min(len(ctx)+len(cont)-1, 256).
  DownstreamFixture& f = downstream_fixture();
  bool truncated = false;
  for (const auto& req : f.expected.at("tasks").at("arc_easy:rc").at("requests")) {
    auto ctx = req.at("context_ids").size(), cont = req.at("continuation_ids").size();
    EXPECT_EQ(req.at("query_len").get<std::size_t>(), std::min<std::size_t>(ctx + cont - 1, 256));
    truncated |= ctx + cont - 1 > 256;
  }
  EXPECT_TRUE(truncated);
}

TEST(DownstreamParity, PrimaryMetricFromConfig) {
  EXPECT_EQ(load_task(test::tasks_dir(), parse_task_spec("arc_easy:rc")).primary_metric, "acc");
  EXPECT_EQ(load_task(test::tasks_dir(), parse_task_spec("hellaswag:rc")).primary_metric,
            "acc_per_char");
  EXPECT_EQ(load_task(test::tasks_dir(), parse_task_spec("piqa:bpb")).primary_metric, "bpb");
}

}  // namespace
}  // namespace tandem::eval
