#include "tandem/train/trainer.h"

#include <sys/resource.h>

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/stop_signal.h"
#include "tandem/dist/fsdp.h"
#include "tandem/dist/replicated_optimizer.h"
#include "tandem/dist/zero1.h"
#include "tandem/model/model_io.h"
#include "tandem/train/memory_preflight.h"
#include "tandem/train/op_profile_report.h"
#include "tandem/train/stop_signals.h"

namespace fs = std::filesystem;

namespace tandem::train {

namespace {

std::vector<optim::ParamBuffer> parameter_buffers(const model::Olmo3Model& model) {
  std::vector<optim::ParamBuffer> out;
  for (const model::ParameterEntry& e : model.layout().entries())
    out.push_back({e.name, model.param(e.name), model.grad(e.name), e.weight_decay});
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const RunConfig& config, kernels::Backend& backend,
                                                 model::Olmo3Model& model,
                                                 dist::FsdpParameters* sharded,
                                                 dist::Communicator& comm) {
  if (config.optim.adamw.groups) {  // OLMo-core's checks, against every parameter's name
    std::vector<std::string> names;
    for (const model::ParameterEntry& e : model.layout().entries()) names.push_back(e.name);
    optim::check_group_overrides(*config.optim.adamw.groups, names);
  }
  if (sharded)
    return std::make_unique<dist::FsdpOptimizer>(backend, *sharded, config.optim.adamw, comm);
  // ZeRO-1 with one rank is the replicated optimiser.
  const auto bucket_bytes = static_cast<std::int64_t>(config.dist.bucket_mb * (1 << 20));
  const bool device_sums = !backend.host_accessible() && comm.world_size() > 1;
  if (config.dist.strategy == dist::Strategy::kZero1 && comm.world_size() > 1) {
    auto zero1 = std::make_unique<dist::Zero1Optimizer>(
        backend, parameter_buffers(model), model.params(), model.grads(), config.optim.adamw, comm);
    if (device_sums) zero1->reduce_on_device(model, bucket_bytes);
    return zero1;
  }
  auto replicated = std::make_unique<dist::ReplicatedOptimizer>(
      backend, parameter_buffers(model), model.grads(), config.optim.adamw, comm);
  if (device_sums) replicated->reduce_on_device(model, bucket_bytes);
  return replicated;
}

// This process's resident memory now (Linux /proc/self/statm), in MB.
double resident_megabytes() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0.0;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

// "146368 B (0.14 MiB)": exact for tests and scripts, readable for people.
std::string bytes(std::int64_t n) {
  return fmt::format("{} B ({:.2f} MiB)", n, static_cast<double>(n) / (1024.0 * 1024.0));
}

}  // namespace

Trainer::Trainer(RunConfig config, dist::Communicator& comm)
    : config_(std::move(config)), comm_(comm), run_dir_(config_.trainer.save_folder) {
  fs::create_directories(run_dir_);
  backend_ = kernels::make_backend(config_.backend);
  // A GPU backend's gradients are reduced where they live: by a communicator with device
  // collectives (NCCL), under every strategy (FSDP's unit gathers too).
  if (!backend_->host_accessible() && comm_.world_size() > 1)
    TANDEM_CHECK(comm_.reduces_device_memory(),
                 "backend '{}' with {} ranks: its gradients live on the device, and the {} "
                 "communicator reduces host memory (run with TANDEM_COMMUNICATOR=nccl)",
                 config_.backend, comm_.world_size(), comm_.name());
  // Before anything of the run is allocated on a device: will it fit on every rank's device?
  for (const std::string& line : check_device_memory(config_, *backend_, comm_)) log(line);
  const double rss_before = resident_megabytes();
  if (config_.dist.strategy == dist::Strategy::kFsdp ||
      config_.dist.strategy == dist::Strategy::kHsdp)
    sharded_ =
        std::make_unique<dist::FsdpParameters>(config_.model, *backend_, comm_, config_.dist);
  model_ = std::make_unique<model::Olmo3Model>(config_.model, *backend_, config_.precision,
                                               sharded_.get());
  model_->set_recompute(config_.trainer.recompute);
  // Evaluations between steps run in pieces of the training micro-batch: no more memory than a
  // step (what `tandem plan` and the check above count).
  model_->set_forward_only_token_limit(rank_micro_batch_tokens());
  optimizer_ = make_optimizer(config_, *backend_, *model_, sharded_.get(), comm_);
  // Every buffer so far is zeroed at allocation, so resident; the pools of gathered units and
  // unit gradients are not touched yet.
  state_rss_mb_ = resident_megabytes() - rss_before;
  loader_ = std::make_unique<data::Loader>(config_.data);
  if (config_.trainer.needs_batches_per_epoch())
    config_.trainer.resolve_durations(config_.data.global_batch_size,
                                      static_cast<std::int64_t>(loader_->batches_per_epoch()));
  StepOptions options;
  options.micro_batch_instances = config_.data.micro_batch_size;
  options.horizon = config_.trainer.horizon;
  options.intra_document = config_.data.generate_doc_lengths;
  options.eos_token_id = config_.data.eos_token_id;
  options.bos_token_id = config_.data.bos_token_id;
  train_step_ = std::make_unique<TrainStep>(*model_, *optimizer_, config_.optim, *config_.schedule,
                                            comm_, options);
  checkpoints_ = std::make_unique<CheckpointCallback>(config_, *model_, *optimizer_, *loader_,
                                                      *train_step_, counters_, comm_);
  peak_ = hardware_peak(*backend_, config_.trainer.peak_tflops, comm_.world_size());
  log(fmt::format("backend: {}", backend_->describe()));
  log(fmt::format("precision: {}", model::precision_name(config_.precision)));
  log(fmt::format("data parallel: {} rank(s), {} optimiser ({})", comm_.world_size(),
                  optimizer_->name(), dist::strategy_name(config_.dist.strategy)));
  if (sharded_)
    log(fmt::format("sharded parameters: shard groups of {} rank(s), {} replica(s); prefetch {}",
                    sharded_->shard_group_size(), comm_.world_size() / sharded_->shard_group_size(),
                    sharded_->prefetching()
                        ? (backend_->host_accessible() ? "on (communication thread)"
                                                       : "on (device collectives on their stream)")
                    : config_.dist.prefetch ? "off (one rank per shard group)"
                                            : "off (dist.prefetch false)"));
  // Informative only: a device without room for its 12 MiB of matrices skips it.
  std::string ceiling = "not measured (no device memory left for it)";
  try {
    ceiling = fmt::format("{:.1f} GFLOP/s per device",
                          measure_gemm_flops(*backend_, 1024, 1024, 1024, 0.3) / 1e9);
  } catch (const core::OutOfMemory&) {
  }
  log(fmt::format(
      "MFU peak: {:.1f} GFLOP/s per device x {} ({}); measured fp32 GEMM ceiling {} (not the MFU "
      "denominator)",
      peak_.flops_per_device / 1e9, peak_.devices, peak_.source, ceiling));
}

Trainer::~Trainer() = default;

std::int64_t Trainer::rank_micro_batch_tokens() const {
  return config_.data.micro_batch_size > 0
             ? config_.data.micro_batch_size * config_.data.sequence_length
             : config_.data.instances_per_batch() / comm_.world_size() *
                   config_.data.sequence_length;
}

void Trainer::log_memory() const {
  const std::int64_t rank_tokens = rank_micro_batch_tokens();
  const std::int64_t moments = optimizer_->moment_bytes(), full = optimizer_->full_moment_bytes();
  const char* act = model::precision_name(model_->precision());
  std::string compute =
      model_->compute_weight_bytes() > 0
          ? fmt::format(", compute weights {} ({})", bytes(model_->compute_weight_bytes()), act)
          : std::string();
  std::int64_t params = 0, grads = 0;
  std::string share;
  if (sharded_) {
    params = sharded_->master_bytes();
    grads = sharded_->gradient_bytes();
    share = fmt::format("; sharded 1/{}", sharded_->shard_group_size());
    compute = fmt::format(", gathered unit weights {} ({}, pool), unit gradients {} (fp32, pool)",
                          bytes(sharded_->gathered_weight_bytes()), act,
                          bytes(sharded_->unit_gradient_bytes()));
  } else {
    params = static_cast<std::int64_t>(model_->params().bytes());
    grads = static_cast<std::int64_t>(model_->grads().bytes());
  }
  log(fmt::format(
      "memory per rank ({}): parameters {} (fp32 masters{}){}, gradients {} (fp32{}), Adam moments "
      "{} (fp32{}), saved activations {} ({}, statistics fp32; {} tokens per micro-batch, "
      "recompute {})",
      act, bytes(params), share, compute, bytes(grads), share, bytes(moments),
      moments < full ? "; sharded, replicated " + bytes(full) : std::string(),
      bytes(model_->activation_bytes(rank_tokens)), act, rank_tokens,
      model::recompute_name(model_->recompute())));
  // Measured: what allocating (and zeroing) them added to this process's resident memory.
  log(
      fmt::format("resident memory of parameters, gradients and Adam moments per rank: {:.1f} MB "
                  "(measured, rank {})",
                  state_rss_mb_, comm_.rank()));
}

void Trainer::initialise_weights() {
  if (!config_.trainer.init_from.empty()) {
    const std::string& path = config_.trainer.init_from;
    // An HF release's embedding rows (the tokenizer's, or all the padded ones) are padded to the
    // config's.
    model::LoadOptions options;
    options.embedding_size = config_.model.embedding_size;
    const model::ModelConfig found = model::read_model_dir_config(path, options);
    // An equal parameter count is not enough: the flat buffer would be cut differently.
    model::check_initial_weights(path, found, config_.model);
    if (sharded_) {
      // Only this rank's ranges are read (a 32B model whole would be 128 GB per rank).
      model::WeightShard mine = sharded_->weights();
      model::read_model_weight_slices(path, found, mine.slices, options);
      sharded_->weights_written();
    } else {
      model_->params_from_host(model::read_model_weights(path, found, options).flat);
    }
    log(fmt::format("initial weights from {}", config_.trainer.init_from));
  } else {
    model_->init_weights(config_.trainer.init_seed);
  }
}

void Trainer::start_fresh() {
  if (!config_.trainer.load_path.empty())
    checkpoints_->load_stage_start();
  else
    initialise_weights();
  if (comm_.rank() == 0) {
    YAML::Emitter e;
    e << config_.resolved;
    core::write_file_atomic((fs::path(run_dir_) / "config.yaml").string(),
                            std::string(e.c_str()) + "\n");
  }
  if (config_.trainer.save_initial) checkpoints_->save(CheckpointCallback::SaveKind::kKept);
}

void Trainer::write_op_profile(const kernels::OpProfile& p, std::int64_t step,
                               std::int64_t tokens) {
  nlohmann::json j = op_profile_json(p);
  j["step"] = step;
  j["rank"] = comm_.rank();
  j["backend"] = backend_->describe();
  j["tokens"] = tokens;  // this rank's
  // The ops' FLOPs equal this (the MFU's count) unless recompute adds forwards.
  j["mfu_flops"] =
      config_.model.flops_per_token(config_.data.sequence_length) * static_cast<double>(tokens);
  const fs::path dir = fs::path(run_dir_) / "profile";
  fs::create_directories(dir);
  const std::string path =
      (dir / fmt::format("step-{:06d}.rank-{}.json", step, comm_.rank())).string();
  core::write_file_atomic(path, j.dump(2) + "\n");
  log(fmt::format("op profile of step {} ({}): {}", step, path, op_profile_summary(p, 6)));
}

int Trainer::run() {
  if (!checkpoints_->resume()) start_fresh();
  const std::int64_t first_step = counters_.step;
  std::vector<std::unique_ptr<Callback>> callbacks;
  auto evaluation = std::make_unique<EvaluationCallback>(config_, *model_, comm_);
  auto metrics = std::make_unique<MetricsCallback>(run_dir_, counters_.step, comm_);
  EvaluationCallback& evaluation_callback = *evaluation;
  MetricsCallback& metrics_callback = *metrics;
  callbacks.push_back(std::move(evaluation));
  callbacks.push_back(std::move(metrics));
  if (config_.trainer.progress)
    callbacks.push_back(
        std::make_unique<ProgressCallback>(config_.trainer.log_interval, first_step, comm_));
  callbacks.push_back(std::make_unique<NonFiniteGuard>(config_.trainer.max_consecutive_nonfinite,
                                                       checkpoints_->checkpoints_dir(), comm_));
  comm_.barrier();
  const std::int64_t max_steps = config_.trainer.max_steps;
  const double flops_per_token = config_.model.flops_per_token(config_.data.sequence_length);
  // OLMo-core 3.0's count, for an MFU comparable with what its speed monitor logs.
  const double olmo_core_flops_per_token =
      static_cast<double>(config_.model.olmo_core_flops_per_token(config_.data.sequence_length));
  log(fmt::format(
      "training {} parameters for {} steps of {} tokens ({} instances of {}), {} rank(s)",
      config_.model.total_params(), max_steps, config_.data.global_batch_size,
      config_.data.instances_per_batch(), config_.data.sequence_length, comm_.world_size()));
  if (const optim::TrainingHorizon& h = config_.trainer.horizon; h.max_steps != max_steps)
    log(
        fmt::format("hard stop at step {}; the schedule's horizon is max_duration's {} steps ({} "
                    "tokens)",
                    max_steps, h.max_steps, h.max_tokens));
  log_memory();
  // The backend's peak from here on is the training step's (not the GEMM-ceiling measurement's).
  backend_->reset_peak_bytes();
  backend_->reset_peak_memory();
  if (config_.eval.on_startup && counters_.step < max_steps) {
    // The weights this process starts from, evaluated as at an interval step; its own record,
    // marked, at the step and tokens it starts from (a resume's step has its training record).
    nlohmann::json record = {
        {"step", counters_.step}, {"tokens", counters_.tokens}, {"startup", true}};
    log(fmt::format("evaluation on startup, at step {}", counters_.step));
    evaluation_callback.evaluate_all(record);
    metrics_callback.write(record);
  }
  double step_seconds = 0.0, step_comm_seconds = 0.0, step_busy_seconds = 0.0;
  // A device allocator's driver calls in the training steps after the first (evaluation and
  // checkpoints between them left out): none in a steady run.
  std::int64_t later_steps_driver_allocations = 0, later_steps_cache_releases = 0;
  while (counters_.step < max_steps) {
    int stop_signal = core::stop_signal_received();
    if (comm_.world_size() > 1) {
      // Ranks see a signal at different moments (mpirun passes it on to one after another): stop
      // together at the same step boundary, every rank by the lowest-numbered signal seen.
      std::array<double, kStopSignals.size()> seen{};
      for (std::size_t i = 0; i < seen.size(); ++i) seen[i] = stop_signal == kStopSignals[i];
      comm_.all_reduce_sum(seen.data(), seen.size());
      for (std::size_t i = seen.size(); i-- > 0;)
        if (seen[i] > 0) stop_signal = kStopSignals[i];
    }
    if (stop_signal != 0) {
      log(fmt::format("signal {} received: saving a checkpoint and stopping", stop_signal));
      checkpoints_->save(CheckpointCallback::SaveKind::kKept);
      return 128 + stop_signal;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double comm_before =
        comm_.seconds_in_collectives() + optimizer_->seconds_waiting_for_collectives();
    const double busy_before = optimizer_->seconds_in_own_collectives();
    data::Batch batch = loader_->next_batch(static_cast<std::uint64_t>(comm_.rank()),
                                            static_cast<std::uint64_t>(comm_.world_size()));
    const bool profiled = counters_.step + 1 == config_.trainer.profile_step;
    if (profiled) backend_->start_op_profile();
    const bool counts_driver_calls = counters_.step > first_step;
    const kernels::MemoryStats memory_before =
        counts_driver_calls ? backend_->memory_stats() : kernels::MemoryStats{};
    StepResult r = train_step_->run(batch, counters_.step + 1);
    backend_->synchronize();
    if (counts_driver_calls) {
      const kernels::MemoryStats memory_after = backend_->memory_stats();
      later_steps_driver_allocations +=
          memory_after.driver_allocations - memory_before.driver_allocations;
      later_steps_cache_releases += memory_after.cache_releases - memory_before.cache_releases;
    }
    if (profiled)  // this rank's ops, over its share of the step's tokens
      write_op_profile(backend_->finish_op_profile(), counters_.step + 1,
                       r.tokens / comm_.world_size());
    step_comm_seconds += comm_.seconds_in_collectives() +
                         optimizer_->seconds_waiting_for_collectives() - comm_before;
    step_busy_seconds += optimizer_->seconds_in_own_collectives() - busy_before;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step_seconds += dt;
    if (counters_.step == first_step) {  // what `tandem plan` predicts (docs/distributed.md)
      log(fmt::format("backend memory per rank after the first step: {} held, peak {}",
                      bytes(backend_->bytes_in_use()), bytes(backend_->peak_bytes())));
      // A device allocator's peak adds the kernels' scratch (plan's "kernel scratch" on a GPU).
      if (const kernels::MemoryStats m = backend_->memory_stats(); m.peak_in_use > 0)
        log(fmt::format("device memory per rank in the first step: peak {} in use",
                        bytes(m.peak_in_use)));
      if (const std::string r = optimizer_->describe_reduction(); !r.empty()) log(r);
    }
    ++counters_.step;
    counters_.tokens += r.tokens;
    if (r.skipped) ++counters_.skipped_steps;
    if (r.nonfinite) {
      ++counters_.nonfinite_steps;
      ++counters_.consecutive_nonfinite;
    } else {
      counters_.consecutive_nonfinite = 0;
    }
    const double tps = static_cast<double>(r.tokens) / dt;
    nlohmann::json rec = {{"step", counters_.step},
                          {"tokens", counters_.tokens},
                          {"train/loss", r.ce_loss},
                          {"train/z_loss", r.z_loss},
                          {"train/grad_norm", r.grad_norm},
                          {"lr", r.lr},
                          {"skipped_steps", counters_.skipped_steps},
                          {"nonfinite_steps", counters_.nonfinite_steps},
                          {"tokens_per_s", tps},
                          {"mfu", mfu(tps, flops_per_token, peak_)},
                          {"mfu_olmo_core", mfu(tps, olmo_core_flops_per_token, peak_)}};
    // A group override with its own lr: that group's lr too, named after its place in the config.
    for (std::size_t i = 0; config_.optim.adamw.groups && i < config_.optim.adamw.groups->size();
         ++i)
      if ((*config_.optim.adamw.groups)[i].lr)
        rec[fmt::format("lr/group_overrides[{}]", i)] = r.lrs[i];
    if (r.nonfinite) {
      // JSON has no NaN: record the event rather than the value.
      rec["train/loss"] = nullptr;
      rec["train/z_loss"] = nullptr;
      rec["train/grad_norm"] = nullptr;
    }
    StepEvent event{counters_, r, max_steps, rec};
    for (auto& cb : callbacks) cb->on_step_end(event);
    if (event.stop) return event.exit_code;
    checkpoints_->on_step_end(event);
  }
  checkpoints_->save(CheckpointCallback::SaveKind::kFinal);
  if (const kernels::MemoryStats m = backend_->memory_stats(); m.peak_reserved > 0) {
    log(fmt::format("device memory: peak {} in use, peak {} reserved (caching allocator)",
                    bytes(m.peak_in_use), bytes(m.peak_reserved)));
    // Steady steps take every buffer from the allocator's cache; a release means the device was
    // full (each a device synchronisation, then cudaMalloc again for every block the cache held).
    if (counters_.step > first_step + 1)
      log(
          fmt::format("device allocator in the training steps after the first: {} cudaMalloc "
                      "call(s), {} cache release(s)",
                      later_steps_driver_allocations, later_steps_cache_releases));
  }
  const std::int64_t steps_this_run = counters_.step - first_step;
  if ((comm_.world_size() > 1 || sharded_) && steps_this_run > 0) {
    // Step time and the share spent in collectives (bench/dist_step.sh reads this line).
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    // "in collectives": time the training thread spent inside or waiting for collectives (what
    // communication adds to the step); FSDP's unit collectives also run on its prefetch thread,
    // whose time inside them is "unit collectives" (partly hidden behind compute).
    const std::string unit_comm =
        sharded_ ? fmt::format(", unit collectives {:.1f}% of the step time",
                               step_seconds > 0 ? 100.0 * step_busy_seconds / step_seconds : 0.0)
                 : std::string();
    log(fmt::format(
        "data-parallel: {} steps, {:.2f} ms/step, {:.1f}% in collectives{}, peak RSS {:.1f} MB "
        "(rank 0)",
        steps_this_run, 1e3 * step_seconds / static_cast<double>(steps_this_run),
        step_seconds > 0 ? 100.0 * step_comm_seconds / step_seconds : 0.0, unit_comm,
        static_cast<double>(usage.ru_maxrss) / 1024.0));
  }
  return 0;
}

}  // namespace tandem::train
