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
//          [--batch 1] [--seq 8192] [--micro-batch 1] [--steps 5] [--warmup 2] [--layers N|fit]
//          [--label NAME] [--json FILE] [--profile]
// --layers overrides the model's layer count; --layers fit takes as many of the config's layers
// as the device's memory holds (the 7B-shaped stack of bench/gpu_check.sh): two probe steps with 2
// and 3 layers measure the step's peak device memory (the caching allocator's bytes handed out,
// its cache released before each), whose difference is one layer's share; the stack is then the
// most layers whose predicted peak stays within 93 % of what the device has for tandem (free
// memory plus what tandem holds). Should that still run out of memory, it is retried once with
// three quarters of the layers; the JSON's `layers_fit` records the probes and the choice.
// Prints one JSON object on the last line of stdout (and writes it to --json FILE).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
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
#include "tandem/train/memory_preflight.h"
#include "tandem/train/op_profile_report.h"
#include "tandem/train/plan.h"

namespace {

struct Args {
  std::string config = "configs/models/olmo3-1b.yaml";
  std::string backend = "cuda";
  std::string precision = "bf16";
  std::string label;
  std::string json_out;
  std::int64_t batch = 1, seq = 8192, micro_batch = 1, steps = 5, warmup = 2, layers = 0;
  bool fit_layers = false;  // --layers fit
  bool profile = false;
};

void usage() {
  fmt::print(
      "usage: bench_gpu_train_step --config MODEL.yaml [--backend cuda|cpu] "
      "[--precision bf16|fp32] [--batch B] "
      "[--seq T] [--micro-batch M] [--steps N] [--warmup W] [--layers L|fit] [--label NAME] "
      "[--json FILE] [--profile]\n");
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// A model with its optimiser and a fixed random batch: one call of step() is the benchmarked
// training step (micro-batched forward + backward with z-loss, clipping, AdamW).
class StepRig {
 public:
  StepRig(const tandem::model::ModelConfig& config, tandem::kernels::Backend& backend,
          tandem::model::Precision precision, const Args& a, bool random_weights)
      : backend_(backend),
        model_(config, backend, precision),
        B_(a.batch),
        T_(a.seq),
        M_(a.micro_batch) {
    using namespace tandem;
    if (random_weights)
      model_.init_weights(1);
    else  // memory probes: the values do not change what is allocated
      model_.params_from_host(
          std::vector<float>(static_cast<std::size_t>(model_.layout().total()), 0.0f));
    std::vector<optim::ParamBuffer> params;
    for (const model::ParameterEntry& e : model_.layout().entries())
      params.push_back({e.name, model_.param(e.name), model_.grad(e.name), e.weight_decay});
    optim::AdamWHyper hyper;
    hyper.beta1 = 0.9;
    hyper.beta2 = 0.95;
    hyper.eps = 1e-8;
    hyper.weight_decay = 0.1;
    adamw_ = std::make_unique<optim::AdamW>(backend, params, hyper);
    std::mt19937_64 rng(7);
    ids_.resize(static_cast<std::size_t>(B_ * T_));
    for (auto& id : ids_)
      id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(config.vocab_size));
    labels_ = optim::make_labels(ids_.data(), B_, T_, nullptr);
    grad_scale_ = 1.0f / static_cast<float>(B_ * (T_ - 1));
  }

  void step() {
    using namespace tandem;
    model_.zero_grads();
    double ce = 0.0;
    for (std::int64_t b0 = 0; b0 < B_; b0 += M_) {
      const kernels::LossSums s = model_.forward_backward(
          ids_.data() + b0 * T_, labels_.data() + b0 * T_, M_, T_, 1e-5f, grad_scale_, true);
      ce += s.ce_sum;
    }
    const kernels::Tensor all_grads[] = {model_.grads()};
    last_norm = optim::clip_grad_norm(backend_, all_grads, 1.0);
    adamw_->step(1e-4);
    backend_.synchronize();
    last_loss = ce * static_cast<double>(grad_scale_);
  }

  double last_loss = 0.0, last_norm = 0.0;

 private:
  tandem::kernels::Backend& backend_;
  tandem::model::Olmo3Model model_;
  std::unique_ptr<tandem::optim::AdamW> adamw_;
  std::int64_t B_, T_, M_;
  std::vector<std::int64_t> ids_, labels_;
  float grad_scale_ = 1.0f;
};

tandem::model::ModelConfig with_layers(const std::string& path, std::int64_t layers) {
  std::vector<std::string> overrides;
  if (layers > 0) overrides.push_back(fmt::format("model.n_layers={}", layers));
  return tandem::model::load_model_config(path, overrides);
}

// The step's peak device memory (bytes handed out) with `layers` of the config's layers, the
// allocator's cache released before, so that blocks kept from an earlier probe cannot serve it.
std::int64_t probe_peak(const Args& a, tandem::kernels::Backend& backend,
                        tandem::model::Precision precision, std::int64_t layers) {
  backend.release_cached_memory();
  backend.reset_peak_memory();
  {
    StepRig rig(with_layers(a.config, layers), backend, precision, a, false);
    rig.step();
  }
  const std::int64_t peak = backend.memory_stats().peak_in_use;
  backend.release_cached_memory();
  return peak;
}

// --layers fit: the most layers (up to the config's) whose predicted peak fits, and the record.
std::int64_t fit_layers(const Args& a, tandem::kernels::Backend& backend,
                        tandem::model::Precision precision, nlohmann::json& record) {
  // Of the memory tandem can have, what the stack may plan to use: the rest is for the
  // allocator's rounding and reuse and for what the libraries take as the run goes on. Near the
  // limit a missing cuDNN workspace would not fail the step but move attention to tandem's kernels
  // (said in the JSON's "backend"), so the margin errs on the safe side.
  constexpr double kUsable = 0.93;
  const std::int64_t config_layers = with_layers(a.config, 0).n_layers;
  const std::int64_t p2 = probe_peak(a, backend, precision, 2);
  const std::int64_t p3 = probe_peak(a, backend, precision, 3);
  const tandem::kernels::MemoryStats m = backend.memory_stats();
  const std::int64_t available = m.device_free + m.reserved;
  TANDEM_CHECK(available > 0, "--layers fit: the backend reports no device memory ({})",
               backend.name());
  const double per_layer = static_cast<double>(p3 - p2);
  const double fixed = static_cast<double>(p2) - 2.0 * per_layer;
  TANDEM_CHECK(per_layer > 0, "--layers fit: a third layer did not raise the peak ({} -> {} B)", p2,
               p3);
  const auto fits = static_cast<std::int64_t>(
      std::floor((kUsable * static_cast<double>(available) - fixed) / per_layer));
  TANDEM_CHECK(fits >= 1,
               "--layers fit: not one layer fits: {:.2f} GiB per layer beyond {:.2f} GiB, {:.2f} "
               "GiB available",
               gib(per_layer), gib(fixed), gib(available));
  const std::int64_t layers = std::min(fits, config_layers);
  record = {{"probes",
             {{{"layers", 2}, {"peak_in_use_gib", gib(p2)}},
              {{"layers", 3}, {"peak_in_use_gib", gib(p3)}}}},
            {"per_layer_gib", gib(per_layer)},
            {"fixed_gib", gib(fixed)},
            {"available_gib", gib(available)},
            {"device_total_gib", gib(m.device_total)},
            {"usable_fraction", kUsable},
            {"config_layers", config_layers},
            {"layers", layers},
            {"predicted_peak_gib", gib(fixed + per_layer * static_cast<double>(layers))}};
  fmt::print(
      "--layers fit: {:.2f} GiB per layer beyond {:.2f} GiB, {:.1f} GiB available: {} of "
      "the config's {} layers\n",
      gib(per_layer), gib(fixed), gib(available), layers, config_layers);
  return layers;
}

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
    else if (arg == "--layers") {
      const std::string v = next();
      if (v == "fit")
        a.fit_layers = true;
      else
        a.layers = std::stoll(v);
    } else if (arg == "--profile")
      a.profile = true;
    else {
      fmt::print(stderr, "unknown argument {}\n", arg);
      usage();
      return 2;
    }
  }
  try {
    TANDEM_CHECK(a.batch % a.micro_batch == 0, "--batch {} is not a multiple of --micro-batch {}",
                 a.batch, a.micro_batch);
    std::unique_ptr<kernels::Backend> backend = kernels::make_backend(a.backend);
    fmt::print("backend: {}\n", backend->describe());
    const model::Precision precision = model::parse_precision(a.precision);
    nlohmann::json fit_record;
    std::int64_t layers = a.fit_layers ? fit_layers(a, *backend, precision, fit_record) : a.layers;
    model::ModelConfig config = with_layers(a.config, layers);
    std::unique_ptr<StepRig> rig;
    auto build_and_warm_up = [&] {
      rig = std::make_unique<StepRig>(config, *backend, precision, a, true);
      for (std::int64_t s = 0; s < a.warmup; ++s) rig->step();
    };
    try {
      build_and_warm_up();
    } catch (const core::OutOfMemory& e) {
      if (!a.fit_layers || layers < 2) throw;
      // The fit's prediction was short of the real peak: say so and take fewer layers once.
      rig.reset();
      backend->release_cached_memory();
      const std::int64_t fewer = std::max<std::int64_t>(1, layers * 3 / 4);
      fmt::print("--layers fit: {} layers failed ({}); retrying with {}\n", layers, e.what(),
                 fewer);
      fit_record["failed_with"] = {{"layers", layers}, {"error", e.what()}};
      fit_record["layers"] = layers = fewer;
      config = with_layers(a.config, layers);
      build_and_warm_up();
    }
    const std::int64_t B = a.batch, T = a.seq, M = a.micro_batch;
    backend->reset_peak_memory();
    const kernels::MemoryStats before_timed = backend->memory_stats();
    std::vector<double> times;
    for (std::int64_t s = 0; s < a.steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      rig->step();
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
    // The same throughput in OLMo-core 3.0's count (causal pairs only), for its MFU figures.
    const double olmo_core_flops = static_cast<double>(config.olmo_core_flops_per_token(T));
    j["olmo_core_flops_per_token"] = olmo_core_flops;
    j["mfu_olmo_core_vs_bf16_peak"] = olmo_core_flops * tokens_per_s / peak_bf16;
    j["peak_bf16_tflops"] = peak_bf16 / 1e12;
    j["peak_fp32_tflops"] = peak_fp32 / 1e12;
    j["peak_source"] = backend->describe_peak(kernels::DType::bf16);
    j["peak_memory_in_use_gib"] = gib(mem.peak_in_use);
    j["peak_memory_reserved_gib"] = gib(mem.peak_reserved);
    j["device_memory_total_gib"] = gib(mem.device_total);
    // The allocator's calls to the driver in the timed steps: none where every buffer comes from
    // its cache, as after the warm-up it should (docs/cuda.md, Memory).
    j["timed_steps_cuda_mallocs"] = mem.driver_allocations - before_timed.driver_allocations;
    j["timed_steps_cache_releases"] = mem.cache_releases - before_timed.cache_releases;
    // `tandem plan`'s count of the same step (its backend memory: buffers and, on the CUDA
    // backend, the kernels' scratch), against the peak measured over the timed steps.
    {
      train::PlanInput in;
      in.model = config;
      in.sequence_length = T;
      in.global_batch_instances = B;
      in.micro_batch_instances = M;
      in.bf16 = precision == model::Precision::kBf16;
      // This device's room (free plus held by tandem's allocator) decides the attention path
      // as the backend decided it.
      in.device =
          mem.device_total > 0 ? train::device_spec_of(*backend) : train::device_spec("cpu");
      const train::Plan plan = train::make_plan(in);
      j["planned_backend_memory_gib"] = gib(plan.backend_bytes);
    }
    if (a.fit_layers) j["layers_fit"] = fit_record;
    j["last_loss"] = rig->last_loss;
    j["last_grad_norm"] = rig->last_norm;
    const double timed_loss = rig->last_loss;  // the profiled step below moves it on
    if (a.profile) {
      backend->start_op_profile();
      rig->step();
      const kernels::OpProfile p = backend->finish_op_profile();
      j["profile"] = train::op_profile_json(p);
      // What the MFU counts for the step (the ops' FLOPs equal it: OpProfileFlops.*).
      j["profile"]["mfu_flops"] = flops_per_token * static_cast<double>(B * T);
      j["profile"]["loss"] = rig->last_loss;
      fmt::print("profile of one step: {}\n", train::op_profile_summary(p, p.ops.size()));
    }
    fmt::print(
        "{} ({}): {:.0f} tokens/s, {:.3f} s/step (median of {}), {:.1f} TFLOP/s = MFU {:.1f}% of "
        "the "
        "bf16 peak ({:.0f} TFLOP/s), {:.1f}% of the fp32 peak; peak memory {:.1f} GiB in use, "
        "{:.1f} GiB reserved, {} cudaMalloc call(s) in the timed steps; loss {:.4f}\n",
        a.label.empty() ? a.config : a.label, model::precision_name(precision), tokens_per_s,
        step_s, a.steps, achieved / 1e12, 100.0 * achieved / peak_bf16, peak_bf16 / 1e12,
        100.0 * achieved / peak_fp32, gib(mem.peak_in_use), gib(mem.peak_reserved),
        j["timed_steps_cuda_mallocs"].get<std::int64_t>(), timed_loss);
    if (!a.json_out.empty()) std::ofstream(a.json_out) << j.dump(2) << "\n";
    fmt::print("{}\n", j.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_train_step: {}\n", e.what());
    return 1;
  }
  return 0;
}
