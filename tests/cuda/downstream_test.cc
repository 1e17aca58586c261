// Downstream evaluation on the CUDA backend against the real references (the fixtures of
// tests/eval/downstream_parity_test.cc, from tools/make_eval_fixtures.py): each request's
// log-likelihood against HF transformers' (fp32) on olmo-eval's own token ids, and the whole
// evaluation (tokenizing, scoring, metrics) against olmo-eval's metric values. The bounds are the
// CPU test's: the same references, the same precision, only the summation order differs.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/downstream.h"
#include "tandem/model/model_io.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem {
namespace {

class CudaDownstream : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaDownstream, ScoresAsTransformersAndMeasuresAsOlmoEval) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture("eval");
  const auto expected = nlohmann::json::parse(core::read_file(dir + "/expected.json"));
  const auto& exp = expected.at("tasks").at(GetParam());
  const std::int64_t max_len = expected.at("model_ctx_len");
  auto model = model::load_model(dir + "/model", gpu);

  // Per-request log-likelihoods on olmo-eval's token ids, within 1e-4 of HF's; one batch of
  // several requests of different lengths, and (for one task) one request per pass.
  std::vector<eval::TokenizedRequest> tokens;
  std::vector<double> hf_logp;
  for (const auto& r : exp.at("requests")) {
    eval::TokenizedRequest t;
    t.context = r.at("context_ids").get<std::vector<std::int64_t>>();
    t.continuation = r.at("continuation_ids").get<std::vector<std::int64_t>>();
    tokens.push_back(std::move(t));
    hf_logp.push_back(r.at("logprob").get<double>());
  }
  double worst = 0.0;
  for (std::int64_t batch_tokens : {std::int64_t{1}, std::int64_t{700}}) {
    if (batch_tokens == 1 && GetParam() != "winogrande:rc") continue;
    const std::vector<double> ours = eval::score_requests(*model, tokens, max_len, batch_tokens);
    ASSERT_EQ(ours.size(), hf_logp.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      EXPECT_NEAR(ours[i], hf_logp[i], 1e-4) << GetParam() << " request " << i;
      worst = std::max(worst, std::fabs(ours[i] - hf_logp[i]));
    }
  }
  // For the record: the CPU backend's distance from HF on the same requests (its own test's
  // bound is the same 1e-4).
  auto on_cpu = model::load_model(dir + "/model", testing::cpu_backend());
  const std::vector<double> cpu = eval::score_requests(*on_cpu, tokens, max_len, 700);
  double cpu_worst = 0.0;
  for (std::size_t i = 0; i < cpu.size(); ++i)
    cpu_worst = std::max(cpu_worst, std::fabs(cpu[i] - hf_logp[i]));
  RecordProperty("max_abs_logp_diff", std::to_string(worst));
  RecordProperty("cpu_max_abs_logp_diff", std::to_string(cpu_worst));

  // End to end on the GPU: our tokenizer, scoring and metrics against olmo-eval's values.
  const auto tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
  eval::DownstreamOptions options;
  options.tasks_dir = dir + "/oe_eval_tasks";
  options.max_length = max_len;
  options.batch_tokens = 1024;
  const auto results =
      eval::evaluate_downstream(*model, tokenizer, {eval::parse_task_spec(GetParam())}, options);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].requests, static_cast<std::int64_t>(hf_logp.size()));
  for (const auto& [name, value] : exp.at("metrics").items()) {
    // Accuracies are counts: equal up to olmo-eval's float32 result tensor (1e-6).
    const double v = value.get<double>();
    const double tol = name.starts_with("acc") ? 1e-6 : 1e-4 * std::max(1.0, std::fabs(v));
    ASSERT_TRUE(results[0].metrics.contains(name)) << name;
    EXPECT_NEAR(results[0].metrics.at(name), v, tol) << GetParam() << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tasks, CudaDownstream,
                         ::testing::Values("arc_easy:rc", "hellaswag:rc", "winogrande:rc",
                                           "arc_challenge:mc", "csqa:rc_0shot", "piqa:bpb"),
                         testing::ParamName());

}  // namespace
}  // namespace tandem
