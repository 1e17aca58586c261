#include "tandem/eval/downstream_task.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/eval/mmlu.h"
#include "tandem/io/json.h"

namespace tandem::eval {
namespace {

constexpr std::int64_t kUncondDocIdOffset = 1000000;         // oe-eval's unconditional requests
constexpr std::size_t kMaxLineBytes = std::size_t{1} << 28;  // one request, never near this

// Calls fn(line, line_number) for every line of a plain or gzip file (zlib reads both).
template <typename Fn>
void for_each_line(const std::string& path, Fn&& fn) {
  gzFile file = gzopen(path.c_str(), "rb");
  TANDEM_CHECK(file != nullptr, "{}: cannot open", path);
  // Closed however the loop ends: `fn` throws on a malformed line (LeakSanitizer found the file
  // and zlib's buffers left open then).
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(file, &gzclose);
  std::string line;
  std::int64_t line_number = 0;
  char buffer[1 << 16];
  bool ok = true;
  while (true) {
    int n = gzread(file, buffer, sizeof(buffer));
    if (n < 0) {
      ok = false;
      break;
    }
    if (n == 0) break;
    for (int i = 0; i < n; ++i) {
      if (buffer[i] == '\n') {
        ++line_number;
        fn(line, line_number);
        line.clear();
      } else {
        line.push_back(buffer[i]);
        TANDEM_CHECK(line.size() <= kMaxLineBytes,
                     "{}: line {} is longer than {} bytes (not a requests file?)", path,
                     line_number + 1, kMaxLineBytes);
      }
    }
  }
  int errnum = 0;
  std::string message = ok ? "" : gzerror(file, &errnum);
  closer.reset();
  TANDEM_CHECK(ok, "{}: read error after line {} ({})", path, line_number, message);
  if (!line.empty()) fn(line, line_number + 1);
}

// The label of a request line; nullopt for a string or list label (generation tasks), which
// olmo-eval's bpb scoring keeps whatever the choice index.
std::optional<std::int64_t> label_of(const nlohmann::json& value, bool bpb_only,
                                     const std::string& where) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (bpb_only && value.is_null()) return 0;  // olmo-eval: a missing label means choice 0
  if (bpb_only && (value.is_string() || value.is_array())) return std::nullopt;
  core::fail("{}: \"label\" must be an integer choice index, got {}", where,
             io::json_excerpt(value));
}

}  // namespace

TaskSpec parse_task_spec(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    const InLoopTask* t = find_inloop_task(text);
    TANDEM_CHECK(t != nullptr,
                 "task '{}': neither TASK:VARIANT nor an olmo-eval in-loop label (the labels of "
                 "OLMo-core's task groups; docs/evaluation.md lists them)",
                 text);
    TaskSpec spec;
    spec.name = text;
    spec.task = t->dataset;
    spec.variant_dir = t->variant;
    spec.bpb = t->metric_type == IclMetricType::kBpb;
    spec.inloop = t;
    return spec;
  }
  TANDEM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size() &&
                   text.find(':', colon + 1) == std::string::npos,
               "task '{}': expected TASK:VARIANT (variant rc, mc, bpb or a folder such as "
               "rc_0shot)",
               text);
  TaskSpec spec;
  spec.name = text;
  spec.task = text.substr(0, colon);
  std::string variant = text.substr(colon + 1);
  for (const std::string& part : {spec.task, variant}) {
    for (char c : part) {
      TANDEM_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-',
                   "task '{}': invalid character '{}'", text, c);
    }
  }
  if (variant == "rc") {
    spec.variant_dir = "rc_5shot";
  } else if (variant == "mc") {
    spec.variant_dir = "mc_5shot";
  } else if (variant == "bpb") {
    spec.variant_dir = "rc_5shot";
    spec.bpb = true;
  } else if (variant.size() > 4 && variant.ends_with("_bpb")) {
    spec.variant_dir = variant.substr(0, variant.size() - 4);
    spec.bpb = true;
  } else {
    spec.variant_dir = variant;
  }
  return spec;
}

std::vector<TaskSpec> parse_task_list(const std::string& text) {
  std::vector<TaskSpec> specs;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    TANDEM_CHECK(!item.empty(), "task list '{}': empty entry", text);
    specs.push_back(parse_task_spec(item));
    start = end + 1;
  }
  return specs;
}

std::vector<TaskSpec> default_task_specs() {
  std::vector<TaskSpec> specs;
  for (const char* task : {"arc_easy", "arc_challenge", "hellaswag", "piqa", "winogrande", "boolq",
                           "sciq", "csqa", "openbookqa", "socialiqa"}) {
    for (const char* variant : {"rc", "mc", "bpb"}) {
      specs.push_back(parse_task_spec(std::string(task) + ":" + variant));
    }
  }
  return specs;
}

bool is_task_group(const std::string& name) {
  return name == "default" || name == "olmo3-7b-in-loop";
}

std::vector<TaskSpec> task_group_specs(const std::string& name) {
  if (name == "default") return default_task_specs();
  TANDEM_CHECK(name == "olmo3-7b-in-loop", "unknown task group '{}'", name);
  std::vector<TaskSpec> specs;
  for (const auto& label : olmo3_7b_inloop_suite()) specs.push_back(parse_task_spec(label));
  return specs;
}

std::string default_tasks_dir() {
  if (const char* dir = std::getenv("TANDEM_EVAL_TASKS"); dir && *dir) return dir;
  const char* data = std::getenv("TANDEM_DATA_DIR");
  std::string base = (data && *data) ? data : ".cache/data";
  return base + "/eval/oe_eval_tasks";
}

std::string hf_datasets_dir_for(const std::string& tasks_dir) {
  std::filesystem::path p = std::filesystem::path(tasks_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "…/oe_eval_tasks/"
  return (p.parent_path() / "hf_datasets").string();
}

std::vector<DownstreamRequest> read_requests_file(const std::string& path, bool bpb_only) {
  std::vector<DownstreamRequest> requests;
  for_each_line(path, [&](const std::string& line, std::int64_t line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    std::string where = fmt::format("{}: line {}", path, line_number);
    // Strict: a repeated key or absurd nesting is an error; ids must be integers.
    const nlohmann::json j = io::parse_json(line, where);
    try {
      TANDEM_CHECK(j.is_object(), "{}: expected a JSON object", where);
      for (const char* key : {"request", "doc_id", "idx", "label"}) {
        TANDEM_CHECK(j.contains(key), "{}: missing key \"{}\"", where, key);
      }
      if (j.contains("request_type")) {
        std::string type = io::json_field<std::string>(j, "request_type", where);
        TANDEM_CHECK(type == "loglikelihood" || type == "generate_until_and_loglikelihood",
                     "{}: unsupported request_type \"{}\"", where, type);
      }
      DownstreamRequest r;
      r.doc_id = io::json_field<std::int64_t>(j, "doc_id", where);
      if (r.doc_id >= kUncondDocIdOffset) return;  // unconditional requests: not scored here
      r.cont_id = io::json_field<std::int64_t>(j, "idx", where);
      const std::optional<std::int64_t> label = label_of(j.at("label"), bpb_only, where);
      r.label = label.value_or(0);
      const auto& req = j.at("request");
      TANDEM_CHECK(req.is_object() && req.contains("context") && req.contains("continuation"),
                   "{}: \"request\" needs \"context\" and \"continuation\"", where);
      r.context = io::json_field<std::string>(req, "context", where + ": request");
      r.continuation = io::json_field<std::string>(req, "continuation", where + ": request");
      TANDEM_CHECK(!r.continuation.empty(), "{}: empty continuation", where);
      TANDEM_CHECK(r.cont_id >= 0, "{}: negative idx", where);
      if (bpb_only) {
        if (label && r.label != r.cont_id) return;  // only the gold continuation, as one choice
        r.cont_id = 0;
        r.label = 0;
      }
      requests.push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      core::fail("{}: wrong type ({})", where, e.what());
    }
  });
  return requests;
}

std::string metric_name_from_oe(const std::string& oe_metric, const std::string& where) {
  if (oe_metric == "acc_raw") return "acc";
  if (oe_metric == "acc_per_char") return "acc_per_char";
  if (oe_metric == "acc_per_token") return "acc_per_token";
  if (oe_metric == "logits_per_byte") return "bpb";
  core::fail(
      "{}: primary metric \"{}\" is not supported (acc_raw, acc_per_char, acc_per_token, "
      "logits_per_byte)",
      where, oe_metric);
}

namespace {

// Keeps the first `limit_docs` documents (all their requests) and counts the documents.
void keep_documents(std::vector<DownstreamRequest>&& all, std::int64_t limit_docs,
                    DownstreamTask& task) {
  std::unordered_set<std::int64_t> kept_docs;
  for (auto& r : all) {
    if (!kept_docs.contains(r.doc_id)) {
      if (limit_docs > 0 && static_cast<std::int64_t>(kept_docs.size()) >= limit_docs) continue;
      kept_docs.insert(r.doc_id);
    }
    task.requests.push_back(std::move(r));
  }
  task.documents = static_cast<std::int64_t>(kept_docs.size());
}

DownstreamTask load_mmlu_task(const TaskSpec& spec, std::int64_t limit_docs,
                              const std::string& hf_datasets_dir) {
  const InLoopTask& t = *spec.inloop;
  DownstreamTask task;
  task.spec = spec;
  task.dir = hf_datasets_dir + "/hails/mmlu_no_train (" + t.dataset + ", " + t.variant + ")";
  task.oe_primary_metric = icl_metric_name(t.metric_type);
  task.primary_metric = icl_metric_name(t.metric_type) + "_v2";
  task.fast_mc = t.fast_mc;
  MmluOptions options{t.dataset, t.variant, t.mc_labels, t.metric_type == IclMetricType::kBpb};
  keep_documents(build_mmlu_requests(hf_datasets_dir, options, limit_docs), limit_docs, task);
  TANDEM_CHECK(!task.requests.empty(), "task '{}': no MMLU questions in {}", spec.name, task.dir);
  return task;
}

}  // namespace

DownstreamTask load_task(const std::string& tasks_dir, const TaskSpec& spec,
                         std::int64_t limit_docs, const std::string& hf_datasets_dir) {
  namespace fs = std::filesystem;
  if (spec.inloop && spec.inloop->source == InLoopTask::Source::kMmlu) {
    return load_mmlu_task(
        spec, limit_docs,
        hf_datasets_dir.empty() ? hf_datasets_dir_for(tasks_dir) : hf_datasets_dir);
  }
  DownstreamTask task;
  task.spec = spec;
  task.dir = (fs::path(tasks_dir) / spec.task / spec.variant_dir).string();
  TANDEM_CHECK(fs::is_directory(fs::path(tasks_dir)),
               "task '{}': tasks folder {} not found (run scripts/fetch_eval_data.sh, or set "
               "TANDEM_EVAL_TASKS / --tasks-dir)",
               spec.name, tasks_dir);
  TANDEM_CHECK(fs::is_directory(fs::path(tasks_dir) / spec.task), "task '{}': no task '{}' in {}",
               spec.name, spec.task, tasks_dir);
  TANDEM_CHECK(fs::is_directory(task.dir), "task '{}': no variant folder {}", spec.name, task.dir);
  std::string requests_path = task.dir + "/requests.jsonl.gz";
  if (!fs::exists(requests_path)) requests_path = task.dir + "/requests.jsonl";
  TANDEM_CHECK(fs::exists(requests_path), "task '{}': {} has no requests.jsonl(.gz)", spec.name,
               task.dir);

  std::string config_path = task.dir + "/config.json";
  if (spec.inloop) {
    // The label fixes the metric type (OLMo-core logs every metric ICLMetric computes).
    task.oe_primary_metric = icl_metric_name(spec.inloop->metric_type);
    task.primary_metric = task.oe_primary_metric + "_v2";
    task.fast_mc = spec.inloop->fast_mc;
  } else if (spec.bpb) {
    task.oe_primary_metric = "logits_per_byte";
    task.primary_metric = "bpb";
  } else {
    TANDEM_CHECK(fs::exists(config_path), "task '{}': {} missing", spec.name, config_path);
    nlohmann::json config;
    try {
      config = io::read_json_file(config_path);
      task.oe_primary_metric = io::json_field<std::string>(
          io::json_field<nlohmann::json>(config, "task_config", config_path), "primary_metric",
          config_path + ": task_config");
    } catch (const nlohmann::json::exception& e) {
      core::fail("{}: cannot read task_config.primary_metric ({})", config_path, e.what());
    }
    task.primary_metric = metric_name_from_oe(task.oe_primary_metric, config_path);
  }

  keep_documents(read_requests_file(requests_path, spec.bpb), limit_docs, task);
  TANDEM_CHECK(!task.requests.empty(), "task '{}': {} holds no requests", spec.name, requests_path);
  return task;
}

}  // namespace tandem::eval
