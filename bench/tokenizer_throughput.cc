// Tokenizer throughput, measured side by side in one run:
//   1. tandem single-thread encode (cold word cache, then warm) of real corpus text;
//   2. HF tokenizers single-thread encode of the same documents (python3 + tokenizers, run with
//      RAYON_NUM_THREADS=1; the column is skipped when tokenizers is not importable);
//   3. `tandem data tokenize` end to end (read JSONL, encode, write token files) with 1 and 2
//      threads.
// Usage: bench_tokenizer_throughput [--tokenizer T.json] [--corpus PART.jsonl] [--mb 8]
// Defaults come from scripts/fetch_data.sh's cache (${TANDEM_DATA_DIR:-<repo>/.cache/data}).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/text_inputs.h"
#include "tandem/tokenizer/tokenize_job.h"
#include "tandem/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string shell_output(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  pclose(pipe);
  return out;
}

// HF tokenizers, one thread, the same documents: {"tokens": N, "seconds": [pass1, pass2]}.
nlohmann::json time_hf(const std::string& tokenizer, const std::string& jsonl) {
  const char* script = R"PY(
import json, sys, time
try:
    import tokenizers
except ImportError:
    print("{}"); sys.exit(0)
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
docs = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
times = []
for _ in range(2):
    t = time.perf_counter(); n = 0
    for d in docs:
        n += len(tok.encode(d, add_special_tokens=False).ids)
    times.append(time.perf_counter() - t)
print(json.dumps({"tokens": n, "seconds": times, "version": tokenizers.__version__}))
)PY";
  std::string script_path = (fs::temp_directory_path() / "tandem_bench_hf.py").string();
  tandem::core::write_file_atomic(script_path, script);
  std::string out = shell_output("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 " +
                                 script_path + " " + tokenizer + " " + jsonl + " 2>/dev/null");
  fs::remove(script_path);
  try {
    return nlohmann::json::parse(out);
  } catch (const std::exception&) {
    return nlohmann::json::object();
  }
}

// CMake compiles this file by its absolute path, so the repository is two levels up.
std::string repo_root() { return fs::path(__FILE__).parent_path().parent_path().string(); }

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("TANDEM_DATA_DIR");
  std::string cache = env && *env ? env : repo_root() + "/.cache/data";
  std::string tokenizer_path = cache + "/tokenizers/allenai_dolma2.json";
  std::string corpus = cache + "/corpus/stage2.jsonl";
  double mb = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tokenizer")
      tokenizer_path = argv[i + 1];
    else if (a == "--corpus")
      corpus = argv[i + 1];
    else if (a == "--mb")
      mb = std::atof(argv[i + 1]);
  }
  try {
    if (!fs::exists(tokenizer_path) || !fs::exists(corpus)) {
      fmt::print(stderr, "bench: {} or {} missing: run scripts/fetch_data.sh first\n",
                 tokenizer_path, corpus);
      return 1;
    }
    // The first `mb` megabytes of documents, also written out so every contender reads the same.
    std::vector<std::string> docs;
    std::size_t bytes = 0;
    {
      tandem::io::DocumentReader reader(corpus);
      tandem::io::Document doc;
      while (bytes < mb * 1e6 && reader.next(doc)) {
        bytes += doc.text.size();
        docs.push_back(doc.text);
      }
    }
    fs::path work = fs::temp_directory_path() / "tandem_bench_tokenizer";
    fs::remove_all(work);
    fs::create_directories(work);
    std::string jsonl = (work / "docs.jsonl").string();
    {
      std::string text;
      for (const auto& d : docs) text += nlohmann::json{{"text", d}}.dump() + "\n";
      tandem::core::write_file_atomic(jsonl, text);
    }
    fmt::print("text: {} documents, {:.1f} MB from {}\n", docs.size(), bytes / 1e6, corpus);

    tandem::tokenizer::Tokenizer tok = tandem::tokenizer::Tokenizer::from_file(tokenizer_path);
    tandem::tokenizer::Encoder encoder(tok);
    std::vector<double> times;
    std::uint64_t tokens = 0;
    std::vector<std::uint32_t> ids;
    for (int pass = 0; pass < 2; ++pass) {
      auto t = Clock::now();
      tokens = 0;
      for (const auto& d : docs) {
        ids.clear();
        encoder.encode(d, ids);
        tokens += ids.size();
      }
      times.push_back(seconds_since(t));
    }
    fmt::print("{:<44} {:>10} {:>12} {:>10}\n", "single thread encode", "tokens", "Mtokens/s",
               "MB/s");
    fmt::print("{:<44} {:>10} {:>12.3f} {:>10.2f}\n", "tandem (cold cache)", tokens,
               tokens / times[0] / 1e6, bytes / times[0] / 1e6);
    fmt::print("{:<44} {:>10} {:>12.3f} {:>10.2f}\n", "tandem (warm cache)", tokens,
               tokens / times[1] / 1e6, bytes / times[1] / 1e6);
    nlohmann::json hf = time_hf(tokenizer_path, jsonl);
    double ratio = 0;
    if (hf.contains("tokens")) {
      std::uint64_t hf_tokens = hf["tokens"].get<std::uint64_t>();
      auto hf_times = hf["seconds"].get<std::vector<double>>();
      fmt::print("{:<44} {:>10} {:>12.3f} {:>10.2f}\n",
                 fmt::format("HF tokenizers {} (first pass)", hf["version"].get<std::string>()),
                 hf_tokens, hf_tokens / hf_times[0] / 1e6, bytes / hf_times[0] / 1e6);
      fmt::print("{:<44} {:>10} {:>12.3f} {:>10.2f}\n",
                 fmt::format("HF tokenizers {} (second pass)", hf["version"].get<std::string>()),
                 hf_tokens, hf_tokens / hf_times[1] / 1e6, bytes / hf_times[1] / 1e6);
      if (hf_tokens != tokens)
        fmt::print("WARNING: token counts differ ({} vs {})\n", tokens, hf_tokens);
      ratio = hf_times[1] / times[1];
      fmt::print("tandem / HF single-thread speed (second passes): {:.2f}x\n", ratio);
    } else {
      fmt::print("HF tokenizers: not importable by python3; column skipped\n");
    }

    fmt::print("\n{:<44} {:>10} {:>12} {:>10}\n", "data tokenize end to end", "tokens", "Mtokens/s",
               "MB/s");
    for (int threads : {1, 2}) {
      tandem::tokenizer::TokenizeOptions o;
      o.tokenizer_path = tokenizer_path;
      o.out_dir = (work / fmt::format("out{}", threads)).string();
      o.inputs = {jsonl};
      o.threads = threads;
      o.progress = false;
      auto t = Clock::now();
      tandem::tokenizer::TokenizeSummary s = tandem::tokenizer::run_tokenize(o);
      double secs = seconds_since(t);
      fmt::print("{:<44} {:>10} {:>12.3f} {:>10.2f}\n", fmt::format("{} thread(s)", threads),
                 s.tokens, s.tokens / secs / 1e6, bytes / secs / 1e6);
    }
    fs::remove_all(work);
  } catch (const tandem::core::Error& e) {
    fmt::print(stderr, "bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
