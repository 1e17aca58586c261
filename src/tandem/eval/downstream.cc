#include "tandem/eval/downstream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <numeric>

#include "tandem/core/error.h"
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
  if (tasks.IsScalar() && tasks.as<std::string>() == "default") {
    config.tasks = default_task_specs();
  } else {
    TANDEM_CHECK(tasks.IsSequence() && tasks.size() > 0,
                 "{}: expected a non-empty list of TASK:VARIANT or \"default\"",
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
                                   std::int64_t max_length, std::int64_t batch_tokens) {
  const model::ModelConfig& mc = model.config();
  if (max_length <= 0) {
    TANDEM_CHECK(mc.max_sequence_length > 0,
                 "the model sets no max_sequence_length (-1): give the tasks' max_length");
    max_length = mc.max_sequence_length;
  }
  TANDEM_CHECK(mc.accepts_sequence_length(max_length),
               "max_length {} exceeds the model's max_sequence_length {}", max_length,
               mc.max_sequence_length);
  const std::int64_t V = mc.embedding_size;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    TANDEM_CHECK(!r.continuation.empty(), "request {}: continuation has no tokens", i);
    TANDEM_CHECK(static_cast<std::int64_t>(r.continuation.size()) <= max_length,
                 "request {}: continuation of {} tokens is longer than max_length {}", i,
                 r.continuation.size(), max_length);
    TANDEM_CHECK(query_length(r, max_length) >= 1, "request {}: empty query (no context)", i);
    for (const auto* part : {&r.context, &r.continuation}) {
      for (std::int64_t id : *part) {
        TANDEM_CHECK(id >= 0 && id < mc.vocab_size,
                     "request {}: token {} outside the vocabulary "
                     "({})",
                     i, id, mc.vocab_size);
      }
    }
  }

  // Longest first, so each batch pads little.
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return query_length(requests[a], max_length) > query_length(requests[b], max_length);
  });

  std::vector<double> scores(requests.size(), 0.0);
  std::vector<std::int64_t> ids;
  std::size_t start = 0;
  while (start < order.size()) {
    const std::int64_t T = query_length(requests[order[start]], max_length);
    std::int64_t B = std::max<std::int64_t>(1, batch_tokens / T);
    B = std::min<std::int64_t>(B, static_cast<std::int64_t>(order.size() - start));
    ids.assign(static_cast<std::size_t>(B * T), 0);
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& r = requests[order[start + b]];
      std::vector<std::int64_t> full(r.context);
      full.insert(full.end(), r.continuation.begin(), r.continuation.end() - 1);
      std::int64_t q = query_length(r, max_length);
      std::copy(full.end() - q, full.end(), ids.begin() + b * T);
    }
    // One log-probability per continuation token; the lm_head runs at those positions only.
    std::vector<std::size_t> owner;
    std::vector<std::int64_t> positions, targets;
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& r = requests[order[start + b]];
      const std::int64_t q = query_length(r, max_length);
      const auto c = static_cast<std::int64_t>(r.continuation.size());
      for (std::int64_t j = 0; j < c; ++j) {
        owner.push_back(order[start + b]);
        positions.push_back(b * T + q - c + j);  // the logits here predict continuation token j
        targets.push_back(r.continuation[static_cast<std::size_t>(j)]);
      }
    }
    const std::vector<double> logp = model.token_log_probs(ids.data(), B, T, positions, targets);
    for (std::size_t k = 0; k < logp.size(); ++k) scores[owner[k]] += logp[k];
    start += static_cast<std::size_t>(B);
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
    p.task = load_task(dir, spec, options.limit);
    p.tokens = tokenize_requests(tokenizer, p.task);
    tasks_.push_back(std::move(p));
  }
}

std::int64_t DownstreamSuite::total_requests() const {
  std::int64_t n = 0;
  for (const auto& t : tasks_) n += static_cast<std::int64_t>(t.tokens.size());
  return n;
}

std::vector<TaskResult> DownstreamSuite::evaluate(model::Olmo3Model& model) const {
  std::vector<TaskResult> results;
  for (const auto& p : tasks_) {
    auto begin = std::chrono::steady_clock::now();
    std::vector<double> logp;
    try {
      logp = score_requests(model, p.tokens, options_.max_length, options_.batch_tokens);
    } catch (const core::Error& e) {
      core::fail("task '{}' ({}): {}", p.task.spec.name, p.task.dir, e.what());
    }
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
    TaskResult result;
    result.name = p.task.spec.name;
    result.primary_metric = p.task.primary_metric;
    result.metrics = compute_downstream_metrics(scored, p.task.spec.bpb);
    result.documents = p.task.documents;
    result.requests = static_cast<std::int64_t>(scored.size());
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    results.push_back(std::move(result));
  }
  return results;
}

std::vector<TaskResult> evaluate_downstream(model::Olmo3Model& model,
                                            const tokenizer::Tokenizer& tokenizer,
                                            const std::vector<TaskSpec>& specs,
                                            const DownstreamOptions& options) {
  return DownstreamSuite(tokenizer, specs, options).evaluate(model);
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
