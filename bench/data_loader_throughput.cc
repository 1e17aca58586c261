// Tokens per second delivered by tandem's data loader (shuffle and repetition filter on), and by
// OLMo-core's NumpyFSLDataLoader on the same files in the same run (when python3 can import
// olmo_core; that column is skipped otherwise).
//
//   bench_data_loader_throughput [--tokens-per-file N] [--files F] [--seq S] [--batch B]
//                                [--steps K]
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/data/loader.h"
#include "tandem/io/config.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::uint64_t tokens_per_file = 8u << 20;
  int files = 4;
  int seq = 4096;
  int batch = 64;  // instances per global batch
  int steps = 64;
};

// Deterministic pseudo-text: random ids with an occasional long repeat for the filter to catch.
void write_file(const std::string& path, std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint32_t> toks(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::uint64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    toks[i] = static_cast<std::uint32_t>((x >> 33) % 100278);
  }
  for (std::uint64_t start = 0; start + 2000 < n; start += 1 << 18)
    for (std::uint64_t k = 0; k < 1000; ++k) toks[start + k] = toks[start + k % 7];
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()),
             static_cast<std::streamsize>(toks.size() * 4));
}

std::string python_olmo_core(const std::vector<std::string>& files, const Options& o,
                             const std::string& dir) {
  if (std::system("python3 -c 'import olmo_core' >/dev/null 2>&1") != 0) return "";
  std::string script = dir + "/olmo_bench.py";
  std::string list;
  for (const auto& f : files) list += (list.empty() ? "'" : ", '") + f + "'";
  std::ofstream(script) << fmt::format(R"(
import time, tempfile, warnings
warnings.filterwarnings("ignore")
from olmo_core.data.numpy_dataset import NumpyFSLDataset, InstanceFilterConfig
from olmo_core.data.data_loader import NumpyDataLoaderBase
from olmo_core.data.collator import DataCollator
import numpy as np
ds = NumpyFSLDataset({files}, sequence_length={seq}, pad_token_id=100277, eos_token_id=100257,
                     vocab_size=100278, dtype=np.uint32, instance_filter_config=InstanceFilterConfig())
work = tempfile.mkdtemp(); ds.work_dir = work; ds.prepare()
dl = NumpyDataLoaderBase.wrap_numpy_dataset(ds, global_batch_size={batch} * {seq},
    collator=DataCollator(pad_token_id=100277), work_dir=work, seed=34521, fs_local_rank=0)
dl.reshuffle(epoch=1)
it = iter(dl); next(it)
t = time.perf_counter(); n = 0
for _ in range({steps}):
    b = next(it); n += b["input_ids"].numel()
print(n / (time.perf_counter() - t))
)",
                                       fmt::arg("files", list), fmt::arg("seq", o.seq),
                                       fmt::arg("batch", o.batch), fmt::arg("steps", o.steps));
  std::string cmd = "python3 " + script + " 2>" + dir + "/olmo_bench.err";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) ::pclose(p);
  while (!out.empty() && (out.back() == '\n')) out.pop_back();
  auto last = out.rfind('\n');
  return last == std::string::npos ? out : out.substr(last + 1);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    long v = std::atol(argv[i + 1]);
    if (k == "--tokens-per-file")
      o.tokens_per_file = static_cast<std::uint64_t>(v);
    else if (k == "--files")
      o.files = static_cast<int>(v);
    else if (k == "--seq")
      o.seq = static_cast<int>(v);
    else if (k == "--batch")
      o.batch = static_cast<int>(v);
    else if (k == "--steps")
      o.steps = static_cast<int>(v);
  }
  auto dir =
      (std::filesystem::temp_directory_path() / ("tandem_bench_data_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (int f = 0; f < o.files; ++f) {
    files.push_back(fmt::format("{}/part-{:02d}.npy", dir, f));
    write_file(files.back(), o.tokens_per_file, static_cast<std::uint64_t>(f));
  }
  std::string list;
  for (const auto& f : files) list += "\"" + f + "\",";
  YAML::Node root = YAML::Load(fmt::format(
      "{{paths: [{}], sequence_length: {}, global_batch_size: {}, seed: 34521, vocab_size: "
      "100278, eos_token_id: 100257, pad_token_id: 100277, instance_filter_config: {{}}}}",
      list, o.seq, static_cast<long>(o.batch) * o.seq));
  tandem::data::DataConfig config =
      tandem::data::parse_data_config(tandem::io::ConfigSection(root, "data"));
  tandem::data::Loader loader(config);
  std::uint64_t steps = std::min<std::uint64_t>(o.steps, loader.batches_per_epoch() - 1);
  loader.next_batch(0, 1);  // warm-up: shuffle and first prefetch
  auto t0 = Clock::now();
  std::uint64_t tokens = 0, rejected = 0;
  for (std::uint64_t s = 0; s < steps; ++s) {
    auto b = loader.next_batch(0, 1);
    tokens += b.input_ids.size();
    for (auto m : b.instance_mask) rejected += (m == 0);
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  double ours = tokens / secs;
  fmt::print(
      "data loader throughput: {} files x {} tokens (uint32), seq {}, {} instances per "
      "batch, {} steps, shuffle + repetition filter on\n",
      o.files, o.tokens_per_file, o.seq, o.batch, steps);
  fmt::print("  tandem     : {:>14.0f} tokens/s  ({} instances rejected by the filter)\n", ours,
             rejected);
  std::string theirs = python_olmo_core(files, o, dir);
  if (theirs.empty()) {
    fmt::print("  OLMo-core  : skipped (python3 cannot import olmo_core or its run failed)\n");
    std::ifstream err(dir + "/olmo_bench.err");
    std::string line, last;
    while (std::getline(err, line)) last = line;
    if (!last.empty()) fmt::print("               {}\n", last);
  } else {
    double t = std::atof(theirs.c_str());
    fmt::print("  OLMo-core  : {:>14.0f} tokens/s  (NumpyFSLDataLoader, default 4 threads)\n", t);
    if (t > 0) fmt::print("  ratio      : {:.1f}x\n", ours / t);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
