// Training-step benchmark (forward + backward) of an OLMo 3-shaped model: tokens/s, achieved
// GFLOP/s with the window-aware FLOP count, the measured fp32 GEMM ceiling and the fraction of it
// reached, the peak resident memory of the steps (initialisation excluded), and, when torch +
// transformers are importable, HF Olmo3 (eager) doing the same step on the same machine in the same
// run: in fp32, or under
// --precision bf16 both torch.autocast(cpu, bfloat16) and model.to(torch.bfloat16).
// One precision per process, so that the peak memory is that precision's (bench/precision.sh
// runs both).
//
// Usage: bench_train_step [--config configs/models/olmo3-50m.yaml] [--batch 4] [--seq 512]
//                         [--steps 3] [--precision fp32|bf16]
//                         [--recompute none|full|selective] [--no-torch]
// It also prints the activation bytes kept under the recompute policy and the backend's peak.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/kernels/backend.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/loss_normalization.h"
#include "tandem/train/mfu.h"

namespace {

// Peak resident memory of the training steps alone: the weights' host staging at initialisation
// would otherwise be the peak whatever the precision. Linux resets VmHWM on "5" to clear_refs.
void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

double peak_rss_mib() {
  double kib = 0.0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
    std::fclose(f);
  }
  return kib / 1024.0;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = "configs/models/olmo3-50m.yaml";
  std::int64_t B = 4, T = 512, steps = 3;
  bool torch = true;
  std::string precision = "fp32";
  std::string recompute = "none";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--config")
      config_path = next();
    else if (a == "--batch")
      B = std::stoll(next());
    else if (a == "--seq")
      T = std::stoll(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--precision")
      precision = next();
    else if (a == "--recompute")
      recompute = next();
    else if (a == "--no-torch")
      torch = false;
    else {
      fmt::print(stderr, "unknown argument {}\n", a);
      return 2;
    }
  }
  tandem::model::ModelConfig config = tandem::model::load_model_config(config_path, {});
  std::unique_ptr<tandem::kernels::Backend> backend = tandem::kernels::make_backend("cpu");
  tandem::model::Olmo3Model model(config, *backend, tandem::model::parse_precision(precision));
  model.init_weights(1);
  model.set_recompute(tandem::model::parse_recompute(recompute, "--recompute"));
  std::mt19937_64 rng(7);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T));
  for (auto& id : ids)
    id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(config.vocab_size));
  std::vector<std::int64_t> labels = tandem::optim::make_labels(ids.data(), B, T, nullptr);

  auto step = [&] {
    model.zero_grads();
    model.forward_backward(ids.data(), labels.data(), B, T, 1e-5f,
                           1.0f / static_cast<float>(B * (T - 1)), true);
  };
  reset_peak_rss();
  step();  // warm-up (allocations, oneDNN JIT)
  auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < steps; ++s) step();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(steps);
  const double tokens_per_s = static_cast<double>(B * T) / dt;
  const double gflops = config.flops_per_token(T) * tokens_per_s / 1e9;
  const double ceiling = tandem::train::measure_gemm_flops(*backend, 2048, 2048, 2048, 1.0) / 1e9;
  const tandem::kernels::DType dtype = tandem::model::compute_dtype(model.precision());
  const double peak = backend->peak_flops(dtype) / 1e9;
  const double step_peak_rss_mib = peak_rss_mib();

  nlohmann::json j;
  j["config"] = config_path;
  j["params"] = config.total_params();
  j["precision"] = precision;
  j["backend"] = backend->describe();
  j["tandem_peak_rss_mib"] = step_peak_rss_mib;
  j["tandem_activation_bytes"] = model.activation_bytes(B * T);
  j["tandem_compute_weight_bytes"] = model.compute_weight_bytes();
  j["batch"] = B;
  j["seq"] = T;
  j["threads"] = omp_get_max_threads();
  j["tandem_tokens_per_s"] = tokens_per_s;
  j["tandem_step_s"] = dt;
  j["flops_per_token"] = config.flops_per_token(T);
  j["tandem_gflops"] = gflops;
  j["fp32_gemm_ceiling_gflops"] = ceiling;
  j["fraction_of_ceiling"] = gflops / ceiling;
  j["peak_gflops"] = peak;
  j["mfu"] = gflops / peak;
  j["recompute"] = recompute;
  j["backend_peak_bytes"] = backend->peak_bytes();
  fmt::print(
      "tandem ({}): {:.0f} tokens/s, {:.3f} s/step, peak RSS {:.0f} MiB, {:.1f} GFLOP/s = MFU "
      "{:.1f}% of the stated peak ({:.1f} GFLOP/s: {}) and {:.1f}% of the measured fp32 GEMM "
      "ceiling ({:.1f} GFLOP/s), {} threads\n",
      precision, tokens_per_s, dt, step_peak_rss_mib, gflops, 100.0 * gflops / peak, peak,
      backend->describe_peak(dtype), 100.0 * gflops / ceiling, ceiling, omp_get_max_threads());
  fmt::print("recompute {}: {} bytes of activations kept, {} bytes at the backend's peak\n",
             recompute, model.activation_bytes(B * T), backend->peak_bytes());
  if (torch) {
    // The PyTorch peers of this precision: fp32, or bf16 by autocast and by casting the model.
    const std::vector<std::string> modes = precision == "bf16"
                                               ? std::vector<std::string>{"autocast", "bf16"}
                                               : std::vector<std::string>{"fp32"};
    for (const std::string& mode : modes) {
      std::string cmd = fmt::format(
          "python3 tools/bench_torch_train_step.py --config {} --batch {} --seq {} --steps {} "
          "--threads {} --dtype {} 2>/dev/null",
          config_path, B, T, steps, omp_get_max_threads(), mode);
      std::string out = run_capture(cmd);
      auto line = out.rfind('{');
      auto t = line != std::string::npos ? nlohmann::json::parse(out.substr(line), nullptr, false)
                                         : nlohmann::json();
      if (t.is_discarded() || !t.is_object()) {
        fmt::print("pytorch ({}): not available (torch/transformers not importable); skipped\n",
                   mode);
        continue;
      }
      const double torch_tps = t["tokens_per_s"].get<double>();
      j["torch_" + mode + "_tokens_per_s"] = torch_tps;
      j["torch_" + mode + "_peak_rss_mib"] = t["peak_rss_mib"];
      j["speedup_vs_torch_" + mode] = tokens_per_s / torch_tps;
      j["torch_version"] = t["torch"];
      fmt::print(
          "pytorch (HF Olmo3, eager, {}, torch {}): {:.0f} tokens/s, peak RSS {:.0f} MiB "
          "-> tandem is {:.2f}x\n",
          mode, t["torch"].get<std::string>(), torch_tps, t["peak_rss_mib"].get<double>(),
          tokens_per_s / torch_tps);
    }
  }
  fmt::print("{}\n", j.dump());
  return 0;
}
