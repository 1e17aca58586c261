#include "tandem/eval/downstream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <numeric>

#include "tandem/core/error.h"
#include "tandem/eval/icl_metric.h"
#include "tandem/eval/scoring.h"
#include "tandem/model/model_io.h"

namespace tandem::eval {
namespace {

std::int64_t query_length(const TokenizedRequest& r, std::int64_t max_length) {
  std::int64_t full = static_cast<std::int64_t>(r.context.size() + r.continuation.size()) - 1;
  return std::min(full, max_length);
}

// Tokenizes every request in parallel, one Encoder per thread.
std::vector<TokenizedRequest> tokenize_requests(const tokenizer::Tokenizer& tokenizer,
                                                const DownstreamTask& task) {
  std::vector<TokenizedRequest> out(task.requests.size());
  std::exception_ptr error;
#pragma omp parallel
  {
    tokenizer::Encoder encoder(tokenizer);
    std::vector<std::uint32_t> ids;
#pragma omp for schedule(dynamic, 16)
    for (std::size_t i = 0; i < task.requests.size(); ++i) {
      try {
        const auto& r = task.requests[i];
        ids.clear();
        encoder.encode(r.context, ids);
        out[i].context.assign(ids.begin(), ids.end());
        ids.clear();
        encoder.encode(r.continuation, ids);
        out[i].continuation.assign(ids.begin(), ids.end());
      } catch (...) {
#pragma omp critical
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace

DownstreamConfig parse_downstream_config(io::ConfigSection section) {
  DownstreamConfig config;
  YAML::Node tasks = section.raw("tasks");
  if (tasks.IsScalar() && is_task_group(tasks.as<std::string>())) {
    config.tasks = task_group_specs(tasks.as<std::string>());
  } else {
    TANDEM_CHECK(tasks.IsSequence() && tasks.size() > 0,
                 "{}: expected a non-empty list of TASK:VARIANT or olmo-eval labels, or a group "
                 "(\"default\", \"olmo3-7b-in-loop\")",
                 section.where("tasks"));
    for (const auto& item : tasks) {
      TANDEM_CHECK(item.IsScalar(), "{}: every task must be a string", section.where("tasks"));
      try {
        config.tasks.push_back(parse_task_spec(item.as<std::string>()));
      } catch (const core::Error& e) {
        core::fail("{}: {}", section.where("tasks"), e.what());
      }
    }
  }
  config.interval = section.get_int("interval", 0);
  config.options.limit = section.get_int("limit", 0);
  config.options.tasks_dir = section.get_string("tasks_dir", "");
  config.options.hf_datasets_dir = section.get_string("hf_datasets_dir", "");
  config.tokenizer = section.get_string("tokenizer", "");
  config.options.max_length = section.get_int("max_length", 0);
  config.options.batch_tokens = section.get_int("batch_tokens", 4096);
  TANDEM_CHECK(config.interval >= 0, "{}: must be >= 0", section.where("interval"));
  TANDEM_CHECK(config.options.limit >= 0, "{}: must be >= 0", section.where("limit"));
  TANDEM_CHECK(config.options.max_length >= 0, "{}: must be >= 0", section.where("max_length"));
  TANDEM_CHECK(config.options.batch_tokens > 0, "{}: must be > 0", section.where("batch_tokens"));
  section.finish();
  return config;
}

std::string default_tokenizer_path() {
  const char* data = std::getenv("TANDEM_DATA_DIR");
  std::string base = (data && *data) ? data : ".cache/data";
  return base + "/tokenizers/allenai_dolma2.json";
}

std::vector<double> score_requests(model::Olmo3Model& model,
                                   const std::vector<TokenizedRequest>& requests,
                                   std::int64_t max_length, std::int64_t batch_tokens,
                                   const EvalRanks& ranks) {
  const model::ModelConfig& mc = model.config();
  if (max_length <= 0) {
    TANDEM_CHECK(mc.max_sequence_length > 0,
                 "the model sets no max_sequence_length (-1): give the tasks' max_length");
    max_length = mc.max_sequence_length;
  }
  TANDEM_CHECK(mc.accepts_sequence_length(max_length),
               "max_length {} exceeds the model's max_sequence_length {}", max_length,
               mc.max_sequence_length);
  std::vector<ScoringQuery> queries(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    TANDEM_CHECK(!r.continuation.empty(), "request {}: continuation has no tokens", i);
    TANDEM_CHECK(static_cast<std::int64_t>(r.continuation.size()) <= max_length,
                 "request {}: continuation of {} tokens is longer than max_length {}", i,
                 r.continuation.size(), max_length);
    const std::int64_t q = query_length(r, max_length);
    TANDEM_CHECK(q >= 1, "request {}: empty query (no context)", i);
    std::vector<std::int64_t> full(r.context);
    full.insert(full.end(), r.continuation.begin(), r.continuation.end() - 1);
    queries[i].tokens.assign(full.end() - q, full.end());
    const auto c = static_cast<std::int64_t>(r.continuation.size());
    for (std::int64_t j = 0; j < c; ++j) {
      // The logits at q - c + j predict continuation token j.
      queries[i].targets.emplace_back(q - c + j, r.continuation[static_cast<std::size_t>(j)]);
    }
  }
  std::vector<std::vector<double>> per_token;
  try {
    per_token = score_queries(model, queries, batch_tokens, ranks);
  } catch (const core::Error& e) {
    core::fail("{} (query = the last max_length tokens of context + continuation[:-1])", e.what());
  }
  std::vector<double> scores(requests.size(), 0.0);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    for (double lp : per_token[i]) scores[i] += lp;
  }
  return scores;
}

DownstreamSuite::DownstreamSuite(const tokenizer::Tokenizer& tokenizer,
                                 const std::vector<TaskSpec>& specs,
                                 const DownstreamOptions& options)
    : options_(options) {
  TANDEM_CHECK(!specs.empty(), "no downstream tasks given");
  std::string dir = options.tasks_dir.empty() ? default_tasks_dir() : options.tasks_dir;
  for (const auto& spec : specs) {
    Prepared p;
    p.task = load_task(dir, spec, options.limit, options.hf_datasets_dir);
    p.tokens = tokenize_requests(tokenizer, p.task);
    tasks_.push_back(std::move(p));
  }
}

std::int64_t DownstreamSuite::total_requests() const {
  std::int64_t n = 0;
  for (const auto& t : tasks_) n += static_cast<std::int64_t>(t.tokens.size());
  return n;
}

namespace {

// Per-request log-likelihoods of a "fast" MC task (olmo-eval's fast_mc): one query per document,
// the first choice's (context + continuation[:-1], i.e. the context), and each choice's single
// token scored at its last position.
std::vector<double> score_fast_mc(model::Olmo3Model& model, const DownstreamTask& task,
                                  const std::vector<TokenizedRequest>& tokens,
                                  std::int64_t max_length, std::int64_t batch_tokens,
                                  const EvalRanks& ranks) {
  if (max_length <= 0) max_length = model.config().max_sequence_length;
  std::vector<ScoringQuery> queries;
  std::vector<std::pair<std::size_t, std::size_t>> where(tokens.size());  // (query, target)
  std::map<std::int64_t, std::vector<std::size_t>> by_doc;
  for (std::size_t i = 0; i < task.requests.size(); ++i)
    by_doc[task.requests[i].doc_id].push_back(i);
  for (auto& [doc, members] : by_doc) {
    std::stable_sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return task.requests[a].cont_id < task.requests[b].cont_id;
    });
    ScoringQuery q;
    const auto& ctx = tokens[members.front()].context;
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(ctx.size()), max_length);
    TANDEM_CHECK(n >= 1, "task '{}' document {}: empty context", task.spec.name, doc);
    q.tokens.assign(ctx.end() - n, ctx.end());
    for (std::size_t i : members) {
      const auto& cont = tokens[i].continuation;
      TANDEM_CHECK(cont.size() == 1,
                   "task '{}' document {} choice {}: a fast MC continuation must be one token, "
                   "'{}' is {}",
                   task.spec.name, doc, task.requests[i].cont_id, task.requests[i].continuation,
                   cont.size());
      where[i] = {queries.size(), q.targets.size()};
      q.targets.emplace_back(n - 1, cont[0]);
    }
    queries.push_back(std::move(q));
  }
  auto scores = score_queries(model, queries, batch_tokens, ranks);
  std::vector<double> out(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) out[i] = scores[where[i].first][where[i].second];
  return out;
}

TaskPredictions make_predictions(const DownstreamTask& task,
                                 const std::vector<TokenizedRequest>& tokens,
                                 const std::vector<double>& logp, const DownstreamOptions& options,
                                 std::int64_t model_max_length) {
  const std::int64_t max_length = options.max_length > 0 ? options.max_length : model_max_length;
  TaskPredictions out;
  out.task = task.spec.name;
  for (std::size_t i = 0; i < task.requests.size(); ++i) {
    const auto& r = task.requests[i];
    const auto& t = tokens[i];
    RequestPrediction p;
    p.doc_id = r.doc_id;
    p.cont_id = r.cont_id;
    p.label = r.label;
    p.continuation = r.continuation;
    p.logprob = logp[i];
    p.num_tokens = static_cast<std::int64_t>(t.continuation.size());
    p.context_tokens = static_cast<std::int64_t>(t.context.size());
    p.query_tokens =
        task.fast_mc ? std::min(p.context_tokens, max_length) : query_length(t, max_length);
    p.num_chars = utf8_code_points(r.continuation);
    p.num_bytes = static_cast<std::int64_t>(r.continuation.size());
    out.requests.push_back(std::move(p));
  }
  return out;
}

// olmo-eval's per-request lengths; a fast MC choice takes its document's first choice's.
std::vector<IclScore> icl_scores(const DownstreamTask& task, const std::vector<double>& logp) {
  std::vector<IclScore> out(task.requests.size());
  std::map<std::int64_t, std::size_t> first_choice;
  for (std::size_t i = 0; i < task.requests.size(); ++i) {
    const auto& r = task.requests[i];
    auto [it, inserted] = first_choice.try_emplace(r.doc_id, i);
    if (!inserted && r.cont_id < task.requests[it->second].cont_id) it->second = i;
  }
  for (std::size_t i = 0; i < task.requests.size(); ++i) {
    const auto& r = task.requests[i];
    IclScore& s = out[i];
    s.doc_id = r.doc_id;
    s.cont_id = r.cont_id;
    s.logprob = logp[i];
    const auto& base = task.fast_mc ? task.requests[first_choice.at(r.doc_id)] : r;
    s.label = base.label;
    set_continuation_lengths(base.continuation, s);
  }
  return out;
}

}  // namespace

std::vector<TaskResult> DownstreamSuite::evaluate(model::Olmo3Model& model,
                                                  std::vector<TaskPredictions>* predictions,
                                                  const EvalRanks& ranks) const {
  std::vector<TaskResult> results;
  for (const auto& p : tasks_) {
    auto begin = std::chrono::steady_clock::now();
    std::vector<double> logp;
    try {
      logp = p.task.fast_mc ? score_fast_mc(model, p.task, p.tokens, options_.max_length,
                                            options_.batch_tokens, ranks)
                            : score_requests(model, p.tokens, options_.max_length,
                                             options_.batch_tokens, ranks);
    } catch (const core::Error& e) {
      core::fail("task '{}' ({}): {}", p.task.spec.name, p.task.dir, e.what());
    }
    TaskResult result;
    result.name = p.task.spec.name;
    result.primary_metric = p.task.primary_metric;
    if (p.task.spec.inloop) {
      result.metrics =
          compute_icl_metrics(icl_scores(p.task, logp), p.task.spec.inloop->metric_type);
    } else {
      std::vector<ScoredRequest> scored(p.tokens.size());
      for (std::size_t i = 0; i < scored.size(); ++i) {
        const auto& r = p.task.requests[i];
        scored[i] = {r.doc_id,
                     r.cont_id,
                     r.label,
                     logp[i],
                     static_cast<std::int64_t>(p.tokens[i].continuation.size()),
                     utf8_code_points(r.continuation),
                     static_cast<std::int64_t>(r.continuation.size())};
      }
      result.metrics = compute_downstream_metrics(scored, p.task.spec.bpb);
    }
    result.documents = p.task.documents;
    result.requests = static_cast<std::int64_t>(logp.size());
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (predictions) {
      predictions->push_back(
          make_predictions(p.task, p.tokens, logp, options_, model.config().max_sequence_length));
    }
    results.push_back(std::move(result));
  }
  return results;
}

std::vector<TaskResult> evaluate_downstream(model::Olmo3Model& model,
                                            const tokenizer::Tokenizer& tokenizer,
                                            const std::vector<TaskSpec>& specs,
                                            const DownstreamOptions& options,
                                            std::vector<TaskPredictions>* predictions) {
  return DownstreamSuite(tokenizer, specs, options).evaluate(model, predictions);
}

nlohmann::json downstream_metrics_json(const std::vector<TaskResult>& results) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& r : results) {
    for (const auto& [metric, value] : r.metrics) {
      out["downstream/" + r.name + "/" + metric] = value;
    }
  }
  return out;
}

}  // namespace tandem::eval
