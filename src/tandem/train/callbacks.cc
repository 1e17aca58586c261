#include "tandem/train/callbacks.h"

#include <filesystem>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/data/loader_state.h"
#include "tandem/tokenizer/tokenizer.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/run_directory.h"

namespace fs = std::filesystem;

namespace tandem::train {

void log_line(const dist::Communicator& comm, const std::string& line) {
  if (comm.rank() == 0) fmt::print("{}\n", line);
  std::fflush(stdout);
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "N batches" run since `before`, and on several ranks how they were shared (rank 0 logs).
std::string batches_text(const eval::EvalRanks& ranks, eval::EvalRanks::Count before,
                         const char* what) {
  const eval::EvalRanks::Count now = ranks.count();
  std::string text = fmt::format("{} {}", now.all - before.all, what);
  if (ranks.world_size() > 1)
    text += fmt::format(" shared by {} ranks ({} on rank {})", ranks.world_size(),
                        now.here - before.here, ranks.rank());
  return text;
}

}  // namespace

EvaluationCallback::EvaluationCallback(const RunConfig& config, model::Olmo3Model& model,
                                       dist::Communicator& comm)
    : config_(config), model_(model), comm_(comm), ranks_(comm) {
  for (const auto& set : config_.eval.sets)
    heldout_.push_back(
        eval::open_heldout_set(set.name, set.files, config_.data, config_.eval.max_instances));
  if (config_.eval.padded) {
    padded_ = std::make_unique<eval::PaddedHeldout>(
        *config_.eval.padded, eval::padded_dataset_options(*config_.eval.padded, config_.data));
  }
  if (config_.eval.downstream) {
    const eval::DownstreamConfig& d = *config_.eval.downstream;
    tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(
        d.tokenizer.empty() ? eval::default_tokenizer_path() : d.tokenizer);
    downstream_ = std::make_unique<eval::DownstreamSuite>(tokenizer, d.tasks, d.options);
    downstream_->check_fits(model_.config());  // now, not at the first evaluation
  }
}

void EvaluationCallback::on_step_end(StepEvent& e) {
  if (e.stop) return;
  const std::int64_t step = e.counters.step;
  const bool last = step == e.max_steps;
  const std::int64_t interval = config_.eval.interval;
  const std::int64_t every = config_.eval.downstream ? config_.eval.downstream->interval : 0;
  evaluate(e.record, (interval > 0 && step % interval == 0) || last,
           (every > 0 && step % every == 0) || last);
}

void EvaluationCallback::evaluate_all(nlohmann::json& record) { evaluate(record, true, true); }

void EvaluationCallback::evaluate(nlohmann::json& record, bool heldout, bool downstream) {
  if ((!heldout_.empty() || padded_) && heldout) {
    auto t0 = std::chrono::steady_clock::now();
    const eval::EvalRanks::Count before = ranks_.count();
    for (const auto& h :
         eval::evaluate_heldout(model_, heldout_, config_.eval.batch_instances, ranks_)) {
      record["eval/" + h.name + "/loss"] = h.loss;
      record["eval/" + h.name + "/ppl"] = h.perplexity;
    }
    if (padded_) {
      for (const auto& r : padded_->evaluate(model_, ranks_)) {
        record["eval/" + r.label + "/loss"] = r.loss;
        record["eval/" + r.label + "/ppl"] = r.perplexity;
      }
    }
    log_line(comm_,
             fmt::format("held-out evaluation: {} set(s), {} in {:.1f}s",
                         heldout_.size() + (padded_ ? padded_->dataset().labels().size() : 0),
                         batches_text(ranks_, before, "batches"), seconds_since(t0)));
  }
  if (downstream_ && downstream) {
    auto t0 = std::chrono::steady_clock::now();
    const eval::EvalRanks::Count before = ranks_.count();
    record.update(eval::downstream_metrics_json(downstream_->evaluate(model_, nullptr, ranks_)));
    log_line(comm_, fmt::format("downstream evaluation: {} requests, {} in {:.1f}s",
                                downstream_->total_requests(),
                                batches_text(ranks_, before, "passes"), seconds_since(t0)));
  }
}

MetricsCallback::MetricsCallback(const std::string& run_dir, std::int64_t resumed_step,
                                 const dist::Communicator& comm) {
  // Only rank 0 owns the log (the others would race on its rewrite).
  if (comm.rank() == 0)
    log_ =
        std::make_unique<MetricsLog>((fs::path(run_dir) / "metrics.jsonl").string(), resumed_step);
}

void MetricsCallback::on_step_end(StepEvent& e) { write(e.record); }

void MetricsCallback::write(const nlohmann::json& record) {
  if (log_) log_->write(record);
}

ProgressCallback::ProgressCallback(std::int64_t log_interval, std::int64_t first_step,
                                   const dist::Communicator& comm)
    : log_interval_(log_interval), first_step_(first_step), comm_(comm) {}

void ProgressCallback::on_step_end(StepEvent& e) {
  const std::int64_t step = e.counters.step;
  if (step % log_interval_ != 0 && step != e.max_steps) return;
  const StepResult& r = e.result;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double eta =
      elapsed / static_cast<double>(step - first_step_) * static_cast<double>(e.max_steps - step);
  log_line(
      comm_,
      fmt::format("step {}/{} | loss {} | {:.0f} tok/s | MFU {:.1f}% | lr {:.3e}{} | "
                  "ETA {}",
                  step, e.max_steps, r.nonfinite ? "non-finite" : fmt::format("{:.4f}", r.ce_loss),
                  e.record.value("tokens_per_s", 0.0), 100.0 * e.record.value("mfu", 0.0), r.lr,
                  r.skipped ? " | skipped" : "", format_duration(eta)));
}

void NonFiniteGuard::on_step_end(StepEvent& e) {
  if (e.counters.consecutive_nonfinite < limit_) return;
  std::vector<std::string> none;
  auto last = latest_valid_checkpoint(checkpoints_dir_, &none, comm_);
  log_line(comm_,
           fmt::format("error: {} consecutive non-finite steps; stopping. Last good checkpoint: {}",
                       e.counters.consecutive_nonfinite, last ? *last : std::string("none")));
  e.stop = true;
  e.exit_code = 3;
}

CheckpointCallback::CheckpointCallback(const RunConfig& config, model::Olmo3Model& model,
                                       optim::Optimizer& optimizer, data::Loader& loader,
                                       TrainStep& step, RunCounters& counters,
                                       dist::Communicator& comm)
    : config_(config),
      model_(model),
      optimizer_(optimizer),
      loader_(loader),
      step_(step),
      counters_(counters),
      comm_(comm),
      checkpoints_dir_((fs::path(config.trainer.save_folder) / "checkpoints").string()) {}

void CheckpointCallback::on_step_end(StepEvent& e) {
  if (e.stop) return;
  const std::int64_t every = config_.trainer.save_interval;
  const std::int64_t ephemeral = config_.trainer.ephemeral_save_interval;
  const std::int64_t step = e.counters.step;
  if (every > 0 && step % every == 0) {
    save(SaveKind::kKept);
  } else if (ephemeral > 0 && step % ephemeral == 0) {
    // The run's last step is saved as its final checkpoint right after, which must be kept.
    save(step < e.max_steps ? SaveKind::kEphemeral : SaveKind::kFinal);
  }
}

nlohmann::json CheckpointCallback::state_json(SaveKind kind) const {
  nlohmann::json st;
  if (kind == SaveKind::kEphemeral) st["ephemeral"] = true;
  st["step"] = counters_.step;
  st["tokens"] = counters_.tokens;
  st["skipped_steps"] = counters_.skipped_steps;
  st["nonfinite_steps"] = counters_.nonfinite_steps;
  st["consecutive_nonfinite"] = counters_.consecutive_nonfinite;
  st["skip_step"] = step_.skip_rule().to_json();
  st["loader"] = loader_.state().to_json();
  st["world_size"] = comm_.world_size();
  st["config"] = config_.source;
  return st;
}

void CheckpointCallback::save(SaveKind kind) {
  if (counters_.step == last_saved_step_) return;
  // Every rank writes its own part of the optimizer state (its ZeRO-1 or FSDP range, or its even
  // share of replicated moments).
  const auto started = std::chrono::steady_clock::now();
  optim::OptimizerShard mine = optimizer_.moments_to_save();
  save_checkpoint(checkpoints_dir_, counters_.step, model_, &mine, state_json(kind), comm_);
  prune_checkpoints(checkpoints_dir_, config_.trainer.keep_last, counters_.step, comm_);
  comm_.barrier();
  last_saved_step_ = counters_.step;
  log_line(comm_,
           fmt::format("saved checkpoint {}{} in {:.1f}s", checkpoint_dir_name(counters_.step),
                       kind == SaveKind::kFinal       ? " (final)"
                       : kind == SaveKind::kEphemeral ? " (ephemeral)"
                                                      : "",
                       seconds_since(started)));
}

nlohmann::json CheckpointCallback::load(const std::string& dir, bool with_optimizer) {
  if (!with_optimizer) return load_checkpoint(dir, model_, nullptr, nullptr);
  // Whole tensors, or this rank's ZeRO-1 range, from whatever shards the writer left.
  optim::OptimizerShard mine = optimizer_.moments();
  std::int64_t adam_step = 0;
  nlohmann::json st = load_checkpoint(dir, model_, &mine.slices, &adam_step);
  optimizer_.moments_loaded(adam_step);
  return st;
}

bool CheckpointCallback::resume() {
  std::vector<std::string> warnings;
  std::optional<std::string> latest;
  const auto started = std::chrono::steady_clock::now();
  if (!config_.trainer.fresh_start) {
    latest = latest_valid_checkpoint(checkpoints_dir_, &warnings, comm_);
    for (const auto& w : warnings) log_line(comm_, "warning: " + w);
  }
  if (!latest) {
    // Never silently: all-damaged checkpoints are an error unless a fresh start was asked for.
    const std::string moved = prepare_start_from_scratch(
        config_.trainer.save_folder, config_.trainer.fresh_start, warnings, comm_.rank() == 0);
    if (!moved.empty()) log_line(comm_, moved);
    return false;
  }
  nlohmann::json st = load(*latest, true);
  counters_.step = st.at("step").get<std::int64_t>();
  counters_.tokens = st.at("tokens").get<std::int64_t>();
  counters_.skipped_steps = st.value("skipped_steps", 0);
  counters_.nonfinite_steps = st.value("nonfinite_steps", 0);
  counters_.consecutive_nonfinite = st.value("consecutive_nonfinite", 0);
  step_.skip_rule() = optim::SkipStepRule::from_json(st.at("skip_step"));
  loader_.restore(data::LoaderState::from_json(st.at("loader"), *latest + "/state.json"));
  last_saved_step_ = counters_.step;
  log_line(comm_, fmt::format("resumed from {} (step {}, {} tokens; checked and loaded in {:.1f}s)",
                              *latest, counters_.step, counters_.tokens, seconds_since(started)));
  return true;
}

void CheckpointCallback::load_stage_start() {
  const std::string dir = resolve_checkpoint(config_.trainer.load_path, comm_);
  load(dir, config_.trainer.load_optimizer_state);
  log_line(comm_, fmt::format("stage start from {} (weights{})", dir,
                              config_.trainer.load_optimizer_state ? " and Adam moments" : ""));
}

}  // namespace tandem::train
