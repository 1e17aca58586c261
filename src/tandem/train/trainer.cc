#include "tandem/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cpu/gemm_ceiling.h"
#include "tandem/model/model_io.h"
#include "tandem/optim/grad_clip.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem {

std::atomic<int> g_stop_signal{0};

namespace {

void on_stop_signal(int sig) { g_stop_signal.store(sig); }

std::vector<optim::ParamBuffer> parameter_buffers(Olmo3Model& model) {
  std::vector<optim::ParamBuffer> out;
  for (const ParameterEntry& e : model.layout().entries())
    out.push_back({e.name, model.params().data() + e.offset, model.grads().data() + e.offset,
                   static_cast<std::size_t>(e.numel), e.weight_decay});
  return out;
}

std::vector<optim::GradBuffer> gradient_buffers(Olmo3Model& model) {
  std::vector<optim::GradBuffer> out;
  for (const ParameterEntry& e : model.layout().entries())
    out.push_back({model.grads().data() + e.offset, static_cast<std::size_t>(e.numel)});
  return out;
}

// A checkpoint directory, or a run directory whose latest valid checkpoint is meant; verified.
std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) {
    verify_checkpoint(path);
    return path;
  }
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint((fs::path(path) / "checkpoints").string(), &warnings);
  TANDEM_CHECK(latest.has_value(), "load_path {}: no valid checkpoint found{}", path,
               warnings.empty() ? "" : " (" + warnings.back() + ")");
  return *latest;
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit becomes a write error, not a crash
}

Trainer::Trainer(RunConfig config, Communicator& comm)
    : config_(std::move(config)), comm_(comm), skip_rule_(config_.optim.skip_step_options) {
  run_dir_ = config_.trainer.save_folder;
  checkpoints_dir_ = (fs::path(run_dir_) / "checkpoints").string();
  fs::create_directories(run_dir_);
  model_ = std::make_unique<Olmo3Model>(config_.model);
  if (config_.trainer.zero1 && comm_.world_size() > 1) {
    zero1_ = std::make_unique<Zero1Optimizer>(parameter_buffers(*model_), model_->params().data(),
                                              model_->grads().data(), model_->params().size(),
                                              config_.optim.adamw, comm_);
    log(fmt::format("ZeRO-1: Adam moments {} bytes per rank (replicated: {} bytes)",
                    zero1_->moment_bytes(), zero1_->full_moment_bytes()));
  } else {
    optimizer_ = std::make_unique<optim::AdamW>(parameter_buffers(*model_), config_.optim.adamw);
  }
  loader_ = std::make_unique<data::Loader>(config_.data);
  for (const auto& set : config_.eval.sets)
    heldout_.push_back(
        open_heldout_set(set.name, set.files, config_.data, config_.eval.max_instances));
  if (config_.eval.padded) {
    padded_ = std::make_unique<eval::PaddedHeldout>(
        *config_.eval.padded, eval::padded_dataset_options(*config_.eval.padded, config_.data));
  }
  if (config_.eval.downstream && !config_.eval.downstream.IsNull()) {
    eval::DownstreamConfig d = eval::parse_downstream_config(
        ConfigSection(config_.eval.downstream, "evaluation.downstream", config_.source));
    Tokenizer tokenizer =
        Tokenizer::from_file(d.tokenizer.empty() ? eval::default_tokenizer_path() : d.tokenizer);
    downstream_ = std::make_unique<eval::DownstreamSuite>(tokenizer, d.tasks, d.options);
    downstream_interval_ = d.interval;
  }
  peak_gflops_ = config_.trainer.peak_gflops.value_or(0.0);
  const bool measured = peak_gflops_ <= 0;
  if (measured) peak_gflops_ = kernels::cpu::measure_fp32_gemm_gflops(1024, 1024, 1024, 0.3);
  log(fmt::format("MFU peak: {:.1f} GFLOP/s ({})", peak_gflops_,
                  measured ? "fp32 GEMM measured now" : "trainer.peak_gflops"));
}

Trainer::~Trainer() = default;

void Trainer::log(const std::string& line) const {
  if (comm_.rank() == 0) fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Trainer::initialise_weights() {
  if (!config_.trainer.init_from.empty()) {
    auto src = load_model(config_.trainer.init_from);
    TANDEM_CHECK(src->params().size() == model_->params().size() &&
                     src->config().embedding_size == config_.model.embedding_size,
                 "init_from {}: the model's shapes differ from the config's model",
                 config_.trainer.init_from);
    model_->params() = src->params();
    log(fmt::format("initial weights from {}", config_.trainer.init_from));
  } else {
    model_->init_weights(config_.trainer.init_seed);
  }
}

bool Trainer::resume_from_own_checkpoint() {
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint(checkpoints_dir_, &warnings);
  for (const auto& w : warnings) log("warning: " + w);
  if (!latest) return false;
  nlohmann::json st = load_into_model_and_optimizer(*latest, true);
  step_ = st.at("step").get<std::int64_t>();
  tokens_ = st.at("tokens").get<std::int64_t>();
  skipped_steps_ = st.value("skipped_steps", 0);
  nonfinite_steps_ = st.value("nonfinite_steps", 0);
  consecutive_nonfinite_ = st.value("consecutive_nonfinite", 0);
  skip_rule_ = optim::SkipStepRule::from_json(st.at("skip_step"));
  loader_->restore(data::LoaderState::from_json(st.at("loader"), *latest + "/state.json"));
  last_saved_step_ = step_;
  log(fmt::format("resumed from {} (step {}, {} tokens)", *latest, step_, tokens_));
  return true;
}

OptimizerShard Trainer::optimizer_shard() {
  OptimizerShard out;
  out.shard = comm_.rank();
  const auto& entries = model_->layout().entries();
  if (zero1_) {
    for (const Zero1Optimizer::MomentRange& r : zero1_->moment_ranges()) {
      const ParameterEntry& e = entries[r.param_index];
      out.slices.push_back(
          {e.name, e.shape, static_cast<std::int64_t>(r.start), r.exp_avg, r.exp_avg_sq});
    }
    out.adam_step = zero1_->step_count();
    out.num_shards = comm_.world_size();
  } else {
    // The optimiser holds the parameters in layout order (parameter_buffers).
    for (std::size_t i = 0; i < optimizer_->num_params(); ++i)
      out.slices.push_back({entries[i].name, entries[i].shape, 0, optimizer_->exp_avg(i),
                            optimizer_->exp_avg_sq(i)});
    out.adam_step = optimizer_->step_count();
    out.num_shards = 1;  // replicated: rank 0 writes it all
  }
  return out;
}

nlohmann::json Trainer::load_into_model_and_optimizer(const std::string& dir, bool with_optimizer) {
  if (!with_optimizer) return load_checkpoint(dir, *model_, nullptr, nullptr);
  // Whole tensors, or this rank's ZeRO-1 range, from whatever shards the writer left.
  OptimizerShard mine = optimizer_shard();
  std::int64_t adam_step = 0;
  nlohmann::json st = load_checkpoint(dir, *model_, &mine.slices, &adam_step);
  if (zero1_)
    zero1_->set_step_count(adam_step);
  else
    optimizer_->set_step_count(adam_step);
  return st;
}

// Stage start (AI2's mid-training): weights and Adam moments from another run's checkpoint, fresh
// trainer state, this config's data, seed and schedule.
void Trainer::load_stage_start() {
  std::string dir = resolve_checkpoint(config_.trainer.load_path);
  load_into_model_and_optimizer(dir, config_.trainer.load_optimizer_state);
  log(fmt::format("stage start from {} (weights{})", dir,
                  config_.trainer.load_optimizer_state ? " and Adam moments" : ""));
}

nlohmann::json Trainer::state_json() const {
  nlohmann::json st;
  st["step"] = step_;
  st["tokens"] = tokens_;
  st["skipped_steps"] = skipped_steps_;
  st["nonfinite_steps"] = nonfinite_steps_;
  st["consecutive_nonfinite"] = consecutive_nonfinite_;
  st["skip_step"] = skip_rule_.to_json();
  st["loader"] = loader_->state().to_json();
  st["world_size"] = comm_.world_size();
  st["config"] = config_.source;
  return st;
}

void Trainer::save(bool final_save) {
  if (step_ == last_saved_step_) return;
  // Every rank writes its own optimizer shard (ZeRO-1) or rank 0 all of it (replicated).
  OptimizerShard mine = optimizer_shard();
  save_checkpoint(checkpoints_dir_, step_, *model_, &mine, state_json(), comm_);
  if (comm_.rank() == 0) prune_checkpoints(checkpoints_dir_, config_.trainer.keep_last);
  comm_.barrier();
  last_saved_step_ = step_;
  log(fmt::format("saved checkpoint {}{}", checkpoint_dir_name(step_),
                  final_save ? " (final)" : ""));
}

StepResult Trainer::train_step() {
  const std::int64_t T = config_.data.sequence_length;
  data::Batch batch = loader_->next_batch(static_cast<std::uint64_t>(comm_.rank()),
                                          static_cast<std::uint64_t>(comm_.world_size()));
  std::int64_t count = 0;
  for (auto l : batch.labels) count += l != data::kIgnoreLabel;
  model_->zero_grads();
  // OLMo-core: each micro-batch's loss sum is divided by the local batch's label count.
  const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  double sums[3] = {0.0, 0.0, static_cast<double>(count)};
  for (const data::MicroBatch& mb :
       batch.micro_batches(static_cast<std::size_t>(config_.data.micro_batch_size))) {
    const auto n = static_cast<std::int64_t>(mb.instance_ids.size());
    LossSums s =
        model_->forward_backward(mb.input_ids.data(), mb.labels.data(), n, T,
                                 static_cast<float>(config_.optim.z_loss_multiplier), scale, true);
    sums[0] += s.ce_sum;
    sums[1] += s.z_sum;
  }
  StepResult r;
  if (zero1_) {
    // ZeRO-1: each rank holds the averaged gradients of its range only.
    zero1_->reduce_gradients();
    comm_.all_reduce_sum(sums, 3);
  } else if (comm_.world_size() > 1) {
    // DP: average the per-rank normalised gradients; losses as global means.
    comm_.all_reduce_sum(model_->grads().data(), model_->grads().size());
    const float inv = 1.0f / static_cast<float>(comm_.world_size());
    for (float& g : model_->grads()) g *= inv;
    comm_.all_reduce_sum(sums, 3);
  }
  r.tokens = static_cast<std::int64_t>(batch.num_instances()) * T * comm_.world_size();
  r.ce_loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  r.z_loss = sums[2] > 0 ? config_.optim.z_loss_multiplier * sums[1] / sums[2] : 0.0;
  if (zero1_) {
    r.grad_norm = zero1_->clip(config_.optim.max_grad_norm);
  } else {
    auto grads = gradient_buffers(*model_);
    r.grad_norm = config_.optim.max_grad_norm > 0
                      ? optim::clip_grad_norm(grads, config_.optim.max_grad_norm)
                      : optim::global_grad_norm(grads);
  }
  r.lr = config_.schedule->lr(config_.optim.lr, step_ + 1, config_.trainer.max_steps);
  r.nonfinite =
      !std::isfinite(r.ce_loss) || !std::isfinite(r.z_loss) || !std::isfinite(r.grad_norm);
  if (r.nonfinite) {
    r.skipped = true;
  } else if (config_.optim.skip_step) {
    r.skipped = skip_rule_.observe(r.ce_loss, config_.optim.max_grad_norm > 0
                                                  ? std::optional<double>(r.grad_norm)
                                                  : std::nullopt);
  }
  if (!r.skipped) {
    if (zero1_)
      zero1_->step(r.lr);
    else
      optimizer_->step(r.lr);
  }
  return r;
}

nlohmann::json Trainer::evaluate() {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& set : heldout_) {
    HeldoutResult h = evaluate_heldout(*model_, set, config_.eval.batch_instances);
    out["eval/" + h.name + "/loss"] = h.loss;
    out["eval/" + h.name + "/ppl"] = h.perplexity;
  }
  if (padded_) {
    for (const auto& r : padded_->evaluate(*model_)) {
      out["eval/" + r.label + "/loss"] = r.loss;
      out["eval/" + r.label + "/ppl"] = r.perplexity;
    }
  }
  return out;
}

nlohmann::json Trainer::evaluate_downstream_tasks() {
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json out = eval::downstream_metrics_json(downstream_->evaluate(*model_));
  log(fmt::format("downstream evaluation: {} requests in {:.1f}s", downstream_->total_requests(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  return out;
}

int Trainer::run() {
  const bool resumed = resume_from_own_checkpoint();
  if (!resumed) {
    if (!config_.trainer.load_path.empty())
      load_stage_start();
    else
      initialise_weights();
    if (comm_.rank() == 0) {
      YAML::Emitter e;
      e << config_.resolved;
      write_file_atomic((fs::path(run_dir_) / "config.yaml").string(),
                        std::string(e.c_str()) + "\n");
    }
    if (config_.trainer.save_initial) save(false);
  }
  // Only rank 0 owns the metrics log (the others would race on its rewrite).
  if (comm_.rank() == 0)
    metrics_ = std::make_unique<MetricsLog>((fs::path(run_dir_) / "metrics.jsonl").string(), step_);
  comm_.barrier();
  const std::int64_t max_steps = config_.trainer.max_steps;
  const double flops_per_token = config_.model.flops_per_token(config_.data.sequence_length);
  log(fmt::format(
      "training {} parameters for {} steps of {} tokens ({} instances of {}), {} rank(s)",
      config_.model.total_params(), max_steps, config_.data.global_batch_size,
      config_.data.instances_per_batch(), config_.data.sequence_length, comm_.world_size()));
  auto started = std::chrono::steady_clock::now();
  std::int64_t steps_this_run = 0;
  double step_seconds = 0.0, step_comm_seconds = 0.0;
  int exit_code = 0;
  while (step_ < max_steps) {
    int stop_signal = g_stop_signal.load();
    if (comm_.world_size() > 1) {
      // Ranks see a signal at different moments: stop together at the same step boundary.
      double seen = stop_signal;
      comm_.all_reduce_sum(&seen, 1);
      if (seen != 0 && stop_signal == 0) stop_signal = SIGTERM;
    }
    if (stop_signal != 0) {
      log(fmt::format("signal {} received: saving a checkpoint and stopping", stop_signal));
      save(false);
      return 128 + stop_signal;
    }
    auto t0 = std::chrono::steady_clock::now();
    const double comm_before = comm_.seconds_in_collectives();
    StepResult r = train_step();
    step_comm_seconds += comm_.seconds_in_collectives() - comm_before;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    step_seconds += dt;
    ++step_;
    ++steps_this_run;
    tokens_ += r.tokens;
    if (r.skipped) ++skipped_steps_;
    if (r.nonfinite) {
      ++nonfinite_steps_;
      ++consecutive_nonfinite_;
    } else {
      consecutive_nonfinite_ = 0;
    }
    const double tps = static_cast<double>(r.tokens) / dt;
    const double mfu = flops_per_token * tps / (peak_gflops_ * 1e9);
    nlohmann::json rec = {{"step", step_},
                          {"tokens", tokens_},
                          {"train/loss", r.ce_loss},
                          {"train/z_loss", r.z_loss},
                          {"train/grad_norm", r.grad_norm},
                          {"lr", r.lr},
                          {"skipped_steps", skipped_steps_},
                          {"nonfinite_steps", nonfinite_steps_},
                          {"tokens_per_s", tps},
                          {"mfu", mfu}};
    if (r.nonfinite) {
      // JSON has no NaN: record the event rather than the value.
      rec["train/loss"] = nullptr;
      rec["train/z_loss"] = nullptr;
      rec["train/grad_norm"] = nullptr;
    }
    const bool eval_now = config_.eval.interval > 0 && step_ % config_.eval.interval == 0;
    if (eval_now || (step_ == max_steps && (!heldout_.empty() || padded_))) rec.update(evaluate());
    // Downstream tasks every N steps and at the end of the stage.
    if (downstream_ &&
        ((downstream_interval_ > 0 && step_ % downstream_interval_ == 0) || step_ == max_steps))
      rec.update(evaluate_downstream_tasks());
    if (comm_.rank() == 0) metrics_->write(rec);
    if (config_.trainer.progress &&
        (step_ % config_.trainer.log_interval == 0 || step_ == max_steps)) {
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      double eta =
          elapsed / static_cast<double>(steps_this_run) * static_cast<double>(max_steps - step_);
      log(fmt::format("step {}/{} | loss {} | {:.0f} tok/s | MFU {:.1f}% | lr {:.3e}{} | ETA {}",
                      step_, max_steps,
                      r.nonfinite ? "non-finite" : fmt::format("{:.4f}", r.ce_loss), tps,
                      100.0 * mfu, r.lr, r.skipped ? " | skipped" : "", format_duration(eta)));
    }
    if (consecutive_nonfinite_ >= config_.trainer.max_consecutive_nonfinite) {
      std::vector<std::string> none;
      auto last = latest_valid_checkpoint(checkpoints_dir_, &none);
      log(fmt::format("error: {} consecutive non-finite steps; stopping. Last good checkpoint: {}",
                      consecutive_nonfinite_, last ? *last : std::string("none")));
      return 3;
    }
    if (config_.trainer.save_interval > 0 && step_ % config_.trainer.save_interval == 0)
      save(false);
  }
  save(true);
  if (comm_.world_size() > 1 && steps_this_run > 0) {
    // Step time and the share spent in collectives (bench/dist_step.sh reads this line).
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    log(fmt::format(
        "data-parallel: {} steps, {:.2f} ms/step, {:.1f}% in collectives, peak RSS {:.1f} MB "
        "(rank 0)",
        steps_this_run, 1e3 * step_seconds / static_cast<double>(steps_this_run),
        step_seconds > 0 ? 100.0 * step_comm_seconds / step_seconds : 0.0,
        static_cast<double>(usage.ru_maxrss) / 1024.0));
  }
  return exit_code;
}

}  // namespace tandem
