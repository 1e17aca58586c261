#include "tandem/eval/downstream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
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

namespace {

// A task's requests as scoring queries, and how the per-request log-likelihoods come from the
// queries' per-target log-probabilities.
struct TaskQueries {
  std::vector<ScoringQuery> queries;
  std::function<std::vector<double>(const std::vector<std::vector<double>>&)> per_request;
};

// One query per request: the last max_length tokens of context + continuation[:-1], scored at
// the continuation's tokens; a request's log-likelihood is the sum.
TaskQueries request_queries(const model::ModelConfig& mc,
                            const std::vector<TokenizedRequest>& requests,
                            std::int64_t max_length) {
  if (max_length <= 0) {
    TANDEM_CHECK(mc.max_sequence_length > 0,
                 "the model sets no max_sequence_length (-1): give the tasks' max_length");
    max_length = mc.max_sequence_length;
  }
  TANDEM_CHECK(mc.accepts_sequence_length(max_length),
               "max_length {} exceeds the model's max_sequence_length {}", max_length,
               mc.max_sequence_length);
  TaskQueries out;
  out.queries.resize(requests.size());
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
    out.queries[i].tokens.assign(full.end() - q, full.end());
    const auto c = static_cast<std::int64_t>(r.continuation.size());
    for (std::int64_t j = 0; j < c; ++j) {
      // The logits at q - c + j predict continuation token j.
      out.queries[i].targets.emplace_back(q - c + j, r.continuation[static_cast<std::size_t>(j)]);
    }
  }
  out.per_request = [](const std::vector<std::vector<double>>& per_token) {
    std::vector<double> scores(per_token.size(), 0.0);
    for (std::size_t i = 0; i < per_token.size(); ++i) {
      for (double lp : per_token[i]) scores[i] += lp;
    }
    return scores;
  };
  return out;
}

// The plan of a task's queries; a query the model cannot take is said as the request's query.
std::unique_ptr<ScoringPlan> plan_requests(const model::ModelConfig& mc, const TaskQueries& q,
                                           std::int64_t batch_tokens) {
  try {
    return std::make_unique<ScoringPlan>(mc, q.queries, batch_tokens);
  } catch (const core::Error& e) {
    core::fail("{} (query = the last max_length tokens of context + continuation[:-1])", e.what());
  }
}

}  // namespace

std::vector<double> score_requests(model::Olmo3Model& model,
                                   const std::vector<TokenizedRequest>& requests,
                                   std::int64_t max_length, std::int64_t batch_tokens,
                                   const EvalRanks& ranks) {
  const TaskQueries q = request_queries(model.config(), requests, max_length);
  const std::unique_ptr<ScoringPlan> plan = plan_requests(model.config(), q, batch_tokens);
  return q.per_request(plan->scores(
      ranks.run(model, plan->batches(), [&](std::size_t k) { return plan->run(model, k); })));
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

// The queries of a "fast" MC task (olmo-eval's fast_mc): one query per document, the first
// choice's (context + continuation[:-1], i.e. the context), and each choice's single token scored
// at its last position.
TaskQueries fast_mc_queries(const model::ModelConfig& mc, const DownstreamTask& task,
                            const std::vector<TokenizedRequest>& tokens, std::int64_t max_length) {
  if (max_length <= 0) max_length = mc.max_sequence_length;
  TaskQueries out;
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
      where[i] = {out.queries.size(), q.targets.size()};
      q.targets.emplace_back(n - 1, cont[0]);
    }
    out.queries.push_back(std::move(q));
  }
  out.per_request = [where = std::move(where)](const std::vector<std::vector<double>>& scores) {
    std::vector<double> logp(where.size());
    for (std::size_t i = 0; i < where.size(); ++i)
      logp[i] = scores[where[i].first][where[i].second];
    return logp;
  };
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

// An error of a task's scoring, said with the task's name and folder.
[[noreturn]] void fail_in_task(const DownstreamTask& task, const core::Error& e) {
  core::fail("task '{}' ({}): {}", task.spec.name, task.dir, e.what());
}

// A task's queries and forward passes for the model, or an error that names the task.
std::unique_ptr<ScoringPlan> plan_task(const DownstreamTask& task,
                                       const std::vector<TokenizedRequest>& tokens,
                                       const DownstreamOptions& options,
                                       const model::ModelConfig& mc, TaskQueries& queries) {
  try {
    if (task.fast_mc) {
      queries = fast_mc_queries(mc, task, tokens, options.max_length);
      return std::make_unique<ScoringPlan>(mc, queries.queries, options.batch_tokens);
    }
    queries = request_queries(mc, tokens, options.max_length);
    return plan_requests(mc, queries, options.batch_tokens);
  } catch (const core::Error& e) {
    fail_in_task(task, e);
  }
}

}  // namespace

void DownstreamSuite::check_fits(const model::ModelConfig& mc) const {
  for (const Prepared& p : tasks_) {
    TaskQueries queries;
    plan_task(p.task, p.tokens, options_, mc, queries);
  }
}

std::vector<TaskResult> DownstreamSuite::evaluate(model::Olmo3Model& model,
                                                  std::vector<TaskPredictions>* predictions,
                                                  const EvalRanks& ranks) const {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Every task's passes, planned as one process would (task by task), in one list: the ranks
  // share all of them, however few a task has.
  struct Scoring {
    TaskQueries queries;
    std::unique_ptr<ScoringPlan> plan;
    double seconds = 0.0;  // this rank's: planning, its share of the passes, the metrics
  };
  std::vector<Scoring> scoring(tasks_.size());
  std::vector<EvalBatch> batches;
  std::vector<std::pair<std::size_t, std::size_t>> owner;  // (task, pass of its plan)
  for (std::size_t t = 0; t < tasks_.size(); ++t) {
    const auto begin = Clock::now();
    scoring[t].plan =
        plan_task(tasks_[t].task, tasks_[t].tokens, options_, model.config(), scoring[t].queries);
    for (std::size_t k = 0; k < scoring[t].plan->batches().size(); ++k) {
      batches.push_back(scoring[t].plan->batches()[k]);
      owner.emplace_back(t, k);
    }
    scoring[t].seconds += seconds_since(begin);
  }
  const std::vector<std::vector<double>> passes = ranks.run(model, batches, [&](std::size_t k) {
    const auto [t, pass] = owner[k];
    const auto begin = Clock::now();
    std::vector<double> out;
    try {
      out = scoring[t].plan->run(model, pass);
    } catch (const core::Error& e) {
      fail_in_task(tasks_[t].task, e);
    }
    scoring[t].seconds += seconds_since(begin);
    return out;
  });

  std::vector<TaskResult> results;
  std::size_t next_pass = 0;
  for (std::size_t t = 0; t < tasks_.size(); ++t) {
    const Prepared& p = tasks_[t];
    const auto begin = Clock::now();
    const std::size_t n = scoring[t].plan->batches().size();
    const std::vector<std::vector<double>> mine(
        passes.begin() + static_cast<std::ptrdiff_t>(next_pass),
        passes.begin() + static_cast<std::ptrdiff_t>(next_pass + n));
    next_pass += n;
    const std::vector<double> logp = scoring[t].queries.per_request(scoring[t].plan->scores(mine));
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
    if (predictions) {
      predictions->push_back(
          make_predictions(p.task, p.tokens, logp, options_, model.config().max_sequence_length));
    }
    result.seconds = scoring[t].seconds + seconds_since(begin);
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
