// One full training step of an OLMo 3-shaped model on a backend (the GPU benchmark of
// bench/gpu_check.sh, and usable on the CPU backend): micro-batched forward + backward with z-loss,
// the global gradient norm and clipping, and AdamW over every parameter, timed over several steps
// after warm-up. Reports tokens/s, MFU with the window-aware FLOP count against the device's
// stated dense peak (bf16 tensor-core peak and, separately, its fp32 peak), and peak device memory.
// --precision chooses the precision policy (model/precision.h): bf16 (the default, as OLMo 3 is
// trained) or fp32. --profile adds one step after the timed ones with the backend's op profile
// (kernels/op_profile.h): device time, calls and TFLOP/s per op, and the time the device spent
// between ops, so that one run shows where a step's time goes.
//
// Usage: bench_gpu_train_step --config MODEL.yaml [--backend cuda] [--precision bf16|fp32]
//          [--batch 1] [--seq 8192] [--micro-batch 1] [--steps 5] [--warmup 2] [--layers N]
//          [--label NAME] [--json FILE] [--profile]
// --layers overrides the model's layer count (a 7B layer stack that fits in memory, say).
// Prints one JSON object on the last line of stdout (and writes it to --json FILE).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/grad_clip.h"
#include "tandem/optim/loss_normalization.h"
#include "tandem/train/op_profile_report.h"

namespace {

struct Args {
  std::string config = "configs/models/olmo3-1b.yaml";
  std::string backend = "cuda";
  std::string precision = "bf16";
  std::string label;
  std::string json_out;
  std::int64_t batch = 1, seq = 8192, micro_batch = 1, steps = 5, warmup = 2, layers = 0;
  bool profile = false;
};

void usage() {
  fmt::print(
      "usage: bench_gpu_train_step --config MODEL.yaml [--backend cuda|cpu] "
      "[--precision bf16|fp32] [--batch B] "
      "[--seq T] [--micro-batch M] [--steps N] [--warmup W] [--layers L] [--label NAME] "
      "[--json FILE] [--profile]\n");
}

double gib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (arg == "--help" || arg == "-h") return usage(), 0;
    if (arg == "--config")
      a.config = next();
    else if (arg == "--backend")
      a.backend = next();
    else if (arg == "--precision")
      a.precision = next();
    else if (arg == "--label")
      a.label = next();
    else if (arg == "--json")
      a.json_out = next();
    else if (arg == "--batch")
      a.batch = std::stoll(next());
    else if (arg == "--seq")
      a.seq = std::stoll(next());
    else if (arg == "--micro-batch")
      a.micro_batch = std::stoll(next());
    else if (arg == "--steps")
      a.steps = std::stoll(next());
    else if (arg == "--warmup")
      a.warmup = std::stoll(next());
    else if (arg == "--layers")
      a.layers = std::stoll(next());
    else if (arg == "--profile")
      a.profile = true;
    else {
      fmt::print(stderr, "unknown argument {}\n", arg);
      usage();
      return 2;
    }
  }
  try {
    std::vector<std::string> overrides;
    if (a.layers > 0) overrides.push_back(fmt::format("model.n_layers={}", a.layers));
    const model::ModelConfig config = model::load_model_config(a.config, overrides);
    TANDEM_CHECK(a.batch % a.micro_batch == 0, "--batch {} is not a multiple of --micro-batch {}",
                 a.batch, a.micro_batch);
    std::unique_ptr<kernels::Backend> backend = kernels::make_backend(a.backend);
    fmt::print("backend: {}\n", backend->describe());
    const model::Precision precision = model::parse_precision(a.precision);
    model::Olmo3Model model(config, *backend, precision);
    model.init_weights(1);
    std::vector<optim::ParamBuffer> params;
    for (const model::ParameterEntry& e : model.layout().entries())
      params.push_back({e.name, model.param(e.name), model.grad(e.name), e.weight_decay});
    optim::AdamWHyper hyper;
    hyper.beta1 = 0.9;
    hyper.beta2 = 0.95;
    hyper.eps = 1e-8;
    hyper.weight_decay = 0.1;
    optim::AdamW adamw(*backend, params, hyper);
    const kernels::Tensor all_grads[] = {model.grads()};

    const std::int64_t B = a.batch, T = a.seq, M = a.micro_batch;
    std::mt19937_64 rng(7);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T));
    for (auto& id : ids)
      id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(config.vocab_size));
    const std::vector<std::int64_t> labels = optim::make_labels(ids.data(), B, T, nullptr);
    const float grad_scale = 1.0f / static_cast<float>(B * (T - 1));
    double last_loss = 0.0, last_norm = 0.0;
    auto step = [&] {
      model.zero_grads();
      double ce = 0.0;
      for (std::int64_t b0 = 0; b0 < B; b0 += M) {
        const kernels::LossSums s = model.forward_backward(
            ids.data() + b0 * T, labels.data() + b0 * T, M, T, 1e-5f, grad_scale, true);
        ce += s.ce_sum;
      }
      last_norm = optim::clip_grad_norm(*backend, all_grads, 1.0);
      adamw.step(1e-4);
      backend->synchronize();
      last_loss = ce * static_cast<double>(grad_scale);
    };
    for (std::int64_t s = 0; s < a.warmup; ++s) step();
    backend->reset_peak_memory();
    std::vector<double> times;
    for (std::int64_t s = 0; s < a.steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double step_s = sorted[sorted.size() / 2];  // median
    const double tokens_per_s = static_cast<double>(B * T) / step_s;
    const double flops_per_token = config.flops_per_token(T);
    const double achieved = flops_per_token * tokens_per_s;
    const double peak_bf16 = backend->peak_flops(kernels::DType::bf16);
    const double peak_fp32 = backend->peak_flops(kernels::DType::f32);
    const kernels::MemoryStats mem = backend->memory_stats();

    nlohmann::json j;
    j["label"] = a.label;
    j["config"] = a.config;
    j["backend"] = backend->describe();
    j["precision"] = model::precision_name(precision);
    j["n_layers"] = config.n_layers;
    j["params"] = config.total_params();
    j["batch"] = B;
    j["seq"] = T;
    j["micro_batch"] = M;
    j["steps"] = a.steps;
    j["step_s_median"] = step_s;
    j["step_s"] = times;
    j["tokens_per_s"] = tokens_per_s;
    j["flops_per_token"] = flops_per_token;
    j["achieved_tflops"] = achieved / 1e12;
    j["mfu_vs_bf16_peak"] = achieved / peak_bf16;
    j["mfu_vs_fp32_peak"] = achieved / peak_fp32;
    j["peak_bf16_tflops"] = peak_bf16 / 1e12;
    j["peak_fp32_tflops"] = peak_fp32 / 1e12;
    j["peak_source"] = backend->describe_peak(kernels::DType::bf16);
    j["peak_memory_in_use_gib"] = gib(mem.peak_in_use);
    j["peak_memory_reserved_gib"] = gib(mem.peak_reserved);
    j["last_loss"] = last_loss;
    j["last_grad_norm"] = last_norm;
    const double timed_loss = last_loss;  // the profiled step below moves last_loss on
    if (a.profile) {
      backend->start_op_profile();
      step();
      const kernels::OpProfile p = backend->finish_op_profile();
      j["profile"] = train::op_profile_json(p);
      // What the MFU counts for the step (the ops' FLOPs equal it: OpProfileFlops.*).
      j["profile"]["mfu_flops"] = flops_per_token * static_cast<double>(B * T);
      j["profile"]["loss"] = last_loss;
      fmt::print("profile of one step: {}\n", train::op_profile_summary(p, p.ops.size()));
    }
    fmt::print(
        "{} ({}): {:.0f} tokens/s, {:.3f} s/step (median of {}), {:.1f} TFLOP/s = MFU {:.1f}% of "
        "the "
        "bf16 peak ({:.0f} TFLOP/s), {:.1f}% of the fp32 peak; peak memory {:.1f} GiB in use, "
        "{:.1f} GiB reserved; loss {:.4f}\n",
        a.label.empty() ? a.config : a.label, model::precision_name(precision), tokens_per_s,
        step_s, a.steps, achieved / 1e12, 100.0 * achieved / peak_bf16, peak_bf16 / 1e12,
        100.0 * achieved / peak_fp32, gib(mem.peak_in_use), gib(mem.peak_reserved), timed_loss);
    if (!a.json_out.empty()) std::ofstream(a.json_out) << j.dump(2) << "\n";
    fmt::print("{}\n", j.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_train_step: {}\n", e.what());
    return 1;
  }
  return 0;
}
