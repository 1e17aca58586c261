// Requests/s of downstream scoring (forward only, batched by query length) for a small model.
// Usage: bench_downstream_scoring [MODEL_CONFIG.yaml ...] (default configs/models/olmo3-tiny.yaml
// and olmo3-50m.yaml of the repository holding the build folder). With the data cache present
// (scripts/fetch_data.sh and scripts/fetch_eval_data.sh) it scores real arc_easy:rc and
// hellaswag:rc requests with the dolma2 tokenizer; otherwise synthetic requests of the same shape
// (5-shot context of ~300 tokens, continuation of ~4 tokens).
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "tandem/eval/downstream.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/model_config.h"
#include "tandem/model/olmo3_model.h"

using namespace tandem;

namespace {

std::vector<eval::TokenizedRequest> synthetic_requests(std::int64_t n, std::int64_t vocab) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::int64_t> tok(0, vocab - 1);
  std::uniform_int_distribution<int> ctx_len(200, 400), cont_len(1, 8);
  std::vector<eval::TokenizedRequest> out(n);
  for (auto& r : out) {
    r.context.resize(ctx_len(rng));
    r.continuation.resize(cont_len(rng));
    for (auto& t : r.context) t = tok(rng);
    for (auto& t : r.continuation) t = tok(rng);
  }
  return out;
}

std::vector<eval::TokenizedRequest> real_requests(std::int64_t max_docs) {
  std::string tok_path = eval::default_tokenizer_path();
  std::string tasks = eval::default_tasks_dir();
  if (!std::filesystem::exists(tok_path) || !std::filesystem::is_directory(tasks)) return {};
  tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(tok_path);
  std::vector<eval::TokenizedRequest> out;
  tokenizer::Encoder enc(tokenizer);
  for (const char* name : {"arc_easy:rc", "hellaswag:rc"}) {
    auto task = eval::load_task(tasks, eval::parse_task_spec(name), max_docs);
    for (const auto& r : task.requests) {
      eval::TokenizedRequest t;
      for (auto id : enc.encode(r.context)) t.context.push_back(id);
      for (auto id : enc.encode(r.continuation)) t.continuation.push_back(id);
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) configs.push_back(argv[i]);
  if (configs.empty()) {
    // The binary lives in <repo>/<build>/bench/.
    auto repo =
        std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path();
    configs = {(repo / "configs/models/olmo3-tiny.yaml").string(),
               (repo / "configs/models/olmo3-50m.yaml").string()};
  }
  auto real = real_requests(10);
  fmt::print("threads: {}; requests: {}\n", omp_get_max_threads(),
             real.empty() ? "synthetic (no data cache)" : "arc_easy:rc + hellaswag:rc (dolma2)");
  std::fflush(stdout);
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  for (const auto& path : configs) {
    model::ModelConfig mc = model::load_model_config(path, {});
    model::Olmo3Model model(mc, *backend);
    model.init_weights(1);
    auto requests = real.empty() ? synthetic_requests(200, mc.vocab_size) : real;
    std::int64_t tokens = 0;
    for (const auto& r : requests) {
      tokens += std::min<std::int64_t>(r.context.size() + r.continuation.size() - 1, 1024);
    }
    for (std::int64_t batch_tokens : {1024, 4096}) {
      eval::score_requests(model, {requests.begin(), requests.begin() + 4}, 1024, batch_tokens);
      auto t0 = std::chrono::steady_clock::now();
      eval::score_requests(model, requests, 1024, batch_tokens);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(
          "{:<28} params {:>6.1f}M  batch_tokens {:>5}  {:>5} requests in {:7.2f} s  "
          "{:8.1f} requests/s  {:9.0f} tokens/s\n",
          std::filesystem::path(path).filename().string(), mc.total_params() / 1e6, batch_tokens,
          requests.size(), s, requests.size() / s, tokens / s);
      std::fflush(stdout);
    }
  }
  return 0;
}
