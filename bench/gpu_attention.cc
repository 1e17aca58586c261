// Attention alone, path by path: forward and backward time and TFLOP/s of each of the CUDA
// backend's attention paths on OLMo 3's attention shapes, so that a device call shows what each
// path gives where a training step's profile shows only the one it took. Paths (chosen by
// TANDEM_CUDA_ATTENTION before the backend is made): `default` (cuDNN's fused SDPA where it
// serves), `pieces` (the same with cuDNN's backward cut into one piece per kv head and batch entry,
// TANDEM_CUDA_CUDNN_BACKWARD_PIECES: what the backend does where the device has no room for the
// whole workspace; the problems without documents), `flash` (tandem's tensor-core kernels) and
// `plain`, in bf16; `plain` in fp32 (the parity path). Shapes: the 1B benchmark's (16 heads of 128,
// seq 8192) with its window (4096) and full, and 7B's (32 heads of 128) with its window; each also
// with documents (a start every 1024 tokens: cuDNN does not take them, so `default` is then the
// tensor-core kernels); and one downstream scoring batch (13 queries of 311 tokens), a shape of the
// kind evaluation meets by the hundred. Each row also gives the first call's time: less the median,
// what a new shape costs before it runs (cuDNN builds a graph and plan per shape and keeps them).
// TFLOP/s two ways: `counted`, the MFU's convention (kernels/op_profile.h: every query over
// min(window, T) keys, causality and documents not discounted), and `actual`, the query-key
// pairs the mask lets through (4 D FLOPs each forward, 8 D backward), i.e. the arithmetic the
// kernels must do.
//
// Usage: bench_gpu_attention [--backend cuda] [--quick] [--repeats 5] [--json FILE]
// --quick: small shapes (for the CUDA emulator or a smoke run). Prints one JSON object on the
// last line of stdout (and writes it to --json FILE).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/kernels/backend.h"
#include "tandem/kernels/op_profile.h"

namespace {

using tandem::kernels::Backend;
using tandem::kernels::Buffer;
using tandem::kernels::DType;
using tandem::kernels::Shape;

struct Problem {
  std::string label;
  std::int64_t B, T, Hq, Hkv, D, window, doc_length;  // doc_length 0: no documents
};

// The document start of every token: a new document every `doc_length` tokens.
std::vector<std::int64_t> doc_starts(const Problem& p) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(p.B * p.T));
  for (std::int64_t i = 0; i < p.B * p.T; ++i) {
    const std::int64_t t = i % p.T;
    out[i] = p.doc_length > 0 ? t / p.doc_length * p.doc_length : 0;
  }
  return out;
}

// Query-key pairs the causal, window and document masks let through.
double visible_pairs(const Problem& p) {
  double pairs = 0;
  const std::vector<std::int64_t> starts = doc_starts(p);
  for (std::int64_t t = 0; t < p.T; ++t) {
    std::int64_t first = p.window > 0 ? std::max<std::int64_t>(0, t - p.window + 1) : 0;
    first = std::max(first, starts[t]);
    pairs += static_cast<double>(t - first + 1);
  }
  return pairs * static_cast<double>(p.B * p.Hq);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times one path on one problem: median seconds of forward and of backward over `repeats`.
nlohmann::json measure(Backend& be, const Problem& p, DType dtype, int repeats) {
  const Shape qs{p.B, p.T, p.Hq, p.D}, ks{p.B, p.T, p.Hkv, p.D};
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_tensor = [&](const Shape& s) {
    std::vector<float> host(static_cast<std::size_t>(s.numel()));
    for (float& x : host) x = normal(rng);
    Buffer f32 = be.allocate(DType::f32, s);
    be.upload(f32, host.data());
    if (dtype == DType::f32) return f32;
    Buffer out = be.allocate(dtype, s);
    be.cast(out, f32);
    return out;
  };
  Buffer q = random_tensor(qs), k = random_tensor(ks), v = random_tensor(ks);
  Buffer dout = random_tensor(qs);
  Buffer out = be.allocate(dtype, qs), dq = be.allocate(dtype, qs);
  Buffer dk = be.allocate(dtype, ks), dv = be.allocate(dtype, ks);
  Buffer lse = be.allocate(DType::f32, Shape{p.B, p.Hq, p.T});
  Buffer docs;
  if (p.doc_length > 0) {
    docs = be.allocate(DType::i64, Shape{p.B * p.T});
    be.upload(docs, doc_starts(p).data());
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.D));
  // (median of the timed calls, the first call): the first one warms up, and its time less the
  // median is what a new shape costs before it runs (cuDNN's graph and plan, built per shape and
  // kept; evaluation meets a new shape with every new batch length).
  auto seconds = [&](auto&& op) {
    std::vector<double> t;
    double first = 0.0;
    for (int r = 0; r <= repeats; ++r) {
      be.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      op();
      be.synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r == 0)
        first = s;
      else
        t.push_back(s);
    }
    return std::make_pair(median(t), first);
  };
  const auto [fwd, fwd_first] =
      seconds([&] { be.attention_forward(q, k, v, out, lse, p.window, scale, docs); });
  const auto [bwd, bwd_first] = seconds(
      [&] { be.attention_backward(q, k, v, out, lse, dout, dq, dk, dv, p.window, scale, docs); });
  const double counted_fwd = tandem::kernels::attention_flops(p.B, p.T, p.Hq, p.D, p.window, false);
  const double actual_fwd = 4.0 * static_cast<double>(p.D) * visible_pairs(p);
  nlohmann::json j;
  j["forward_ms"] = 1e3 * fwd;
  j["backward_ms"] = 1e3 * bwd;
  j["forward_first_call_ms"] = 1e3 * fwd_first;
  j["backward_first_call_ms"] = 1e3 * bwd_first;
  j["forward_tflops_counted"] = counted_fwd / fwd / 1e12;
  j["backward_tflops_counted"] = 2 * counted_fwd / bwd / 1e12;
  j["forward_tflops_actual"] = actual_fwd / fwd / 1e12;
  j["backward_tflops_actual"] = 2 * actual_fwd / bwd / 1e12;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "cuda", json_out;
  bool quick = false;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (arg == "--backend")
      backend_name = next();
    else if (arg == "--quick")
      quick = true;
    else if (arg == "--repeats")
      repeats = std::max(1, std::stoi(next()));
    else if (arg == "--json")
      json_out = next();
    else {
      fmt::print(arg == "--help" || arg == "-h" ? stdout : stderr,
                 "usage: bench_gpu_attention [--backend cuda|cpu] [--quick] [--repeats N] "
                 "[--json FILE]\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  std::vector<Problem> problems;
  if (quick) {
    problems = {{"quick, window", 1, 256, 4, 2, 64, 64, 0},
                {"quick, window, documents", 1, 256, 4, 2, 64, 64, 100}};
  } else {
    problems = {{"1B, window 4096", 1, 8192, 16, 16, 128, 4096, 0},
                {"1B, full", 1, 8192, 16, 16, 128, 0, 0},
                {"1B, window 4096, documents of 1024", 1, 8192, 16, 16, 128, 4096, 1024},
                {"7B, window 4096", 1, 8192, 32, 32, 128, 4096, 0},
                {"7B, window 4096, documents of 1024", 1, 8192, 32, 32, 128, 4096, 1024},
                // A downstream scoring pass: batch_tokens 4096 over queries of 311 tokens.
                {"1B, a scoring batch (13 x 311)", 13, 311, 16, 16, 128, 4096, 0}};
  }
  // (path, dtype): the bf16 paths, then the fp32 parity path; the CPU backend has one path.
  struct Path {
    const char* name;
    DType dtype;
  };
  const std::vector<Path> paths =
      backend_name == "cuda" ? std::vector<Path>{{"default", DType::bf16},
                                                 {"pieces", DType::bf16},
                                                 {"flash", DType::bf16},
                                                 {"plain", DType::bf16},
                                                 {"plain", DType::f32}}
                             : std::vector<Path>{{"default", DType::bf16}, {"default", DType::f32}};
  nlohmann::json results = nlohmann::json::array();
  try {
    for (const Path& path : paths) {
      const std::string name = path.name;
      if (name == "default" || name == "pieces")
        unsetenv("TANDEM_CUDA_ATTENTION");
      else
        setenv("TANDEM_CUDA_ATTENTION", path.name, 1);
      // As many pieces as there are: one per kv head and batch entry.
      if (name == "pieces")
        setenv("TANDEM_CUDA_CUDNN_BACKWARD_PIECES", "1048576", 1);
      else
        unsetenv("TANDEM_CUDA_CUDNN_BACKWARD_PIECES");
      std::unique_ptr<Backend> be = tandem::kernels::make_backend(backend_name);
      for (const Problem& p : problems) {
        // The plain kernels (fp32 arithmetic on CUDA cores) on the full 7B shapes would take
        // most of a device call's budget for a number the 1B rows already give.
        if (name == "plain" && p.Hq > 16 && !quick) continue;
        // cuDNN takes no documents, and evaluation's batches never lack room.
        if (name == "pieces" && (p.doc_length > 0 || p.B > 1)) continue;
        nlohmann::json j = measure(*be, p, path.dtype, repeats);
        j["path"] = path.name;
        j["dtype"] = path.dtype == DType::f32 ? "fp32" : "bf16";
        j["problem"] = p.label;
        j["shape"] = {{"B", p.B},
                      {"T", p.T},
                      {"Hq", p.Hq},
                      {"Hkv", p.Hkv},
                      {"D", p.D},
                      {"window", p.window},
                      {"doc_length", p.doc_length}};
        j["backend"] = be->describe();
        fmt::print(
            "{:<36} {:>7} {:>4}: forward {:8.3f} ms ({:6.1f} TFLOP/s actual, {:6.1f} "
            "counted), backward {:8.3f} ms ({:6.1f} actual, {:6.1f} counted)\n",
            p.label, path.name, j["dtype"].get<std::string>(), j["forward_ms"].get<double>(),
            j["forward_tflops_actual"].get<double>(), j["forward_tflops_counted"].get<double>(),
            j["backward_ms"].get<double>(), j["backward_tflops_actual"].get<double>(),
            j["backward_tflops_counted"].get<double>());
        results.push_back(std::move(j));
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_attention: {}\n", e.what());
    return 1;
  }
  unsetenv("TANDEM_CUDA_ATTENTION");
  unsetenv("TANDEM_CUDA_CUDNN_BACKWARD_PIECES");
  const nlohmann::json summary = {{"results", results}, {"repeats", repeats}};
  if (!json_out.empty()) std::ofstream(json_out) << summary.dump(2) << "\n";
  fmt::print("{}\n", summary.dump());
  return 0;
}
