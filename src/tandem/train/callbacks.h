// What happens around the training step, one small callback each (OLMo-core's callbacks/): held-out
// and downstream evaluation, the metrics log, the console progress line, the non-finite guard and
// periodic checkpoints. The trainer runs them in order after every step; a callback may ask the
// loop to stop.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/data/loader.h"
#include "tandem/dist/communicator.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/heldout.h"
#include "tandem/eval/padded_heldout.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/optimizer.h"
#include "tandem/train/metrics_log.h"
#include "tandem/train/train_config.h"
#include "tandem/train/train_step.h"

namespace tandem::train {

// Counters of a run; checkpointed in state.json so a resume continues them.
struct RunCounters {
  std::int64_t step = 0;  // optimiser steps done
  std::int64_t tokens = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t nonfinite_steps = 0;
  std::int64_t consecutive_nonfinite = 0;
};

struct StepEvent {
  const RunCounters& counters;
  const StepResult& result;
  std::int64_t max_steps;
  nlohmann::json& record;  // this step's metrics.jsonl object; callbacks may add to it
  bool stop = false;       // set by a callback: the loop ends after this step
  int exit_code = 0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_step_end(StepEvent& event) = 0;
};

// Logs on rank 0 only.
void log_line(const dist::Communicator& comm, const std::string& line);

// Held-out sets (chunked and padded) every evaluation.interval steps and at the end; downstream
// tasks every
// evaluation.downstream.interval steps and at the end.
class EvaluationCallback final : public Callback {
 public:
  // Every rank evaluates its share of the batches (eval/eval_ranks.h).
  EvaluationCallback(const RunConfig& config, model::Olmo3Model& model, dist::Communicator& comm);
  void on_step_end(StepEvent& event) override;
  // Every configured evaluation now, into `record` (evaluation.on_startup).
  void evaluate_all(nlohmann::json& record);

 private:
  void evaluate(nlohmann::json& record, bool heldout, bool downstream);

  const RunConfig& config_;
  model::Olmo3Model& model_;
  const dist::Communicator& comm_;
  eval::EvalRanks ranks_;
  std::vector<eval::HeldoutSet> heldout_;
  std::unique_ptr<eval::PaddedHeldout> padded_;  // evaluation.padded
  std::unique_ptr<eval::DownstreamSuite> downstream_;
};

// metrics.jsonl on rank 0, cut back to the resumed step when opened.
class MetricsCallback final : public Callback {
 public:
  MetricsCallback(const std::string& run_dir, std::int64_t resumed_step,
                  const dist::Communicator& comm);
  void on_step_end(StepEvent& event) override;
  void write(const nlohmann::json& record);  // rank 0; the others ignore it

 private:
  std::unique_ptr<MetricsLog> log_;
};

// The console line every trainer.log_interval steps: loss, tokens/s, MFU, lr, ETA.
class ProgressCallback final : public Callback {
 public:
  ProgressCallback(std::int64_t log_interval, std::int64_t first_step,
                   const dist::Communicator& comm);
  void on_step_end(StepEvent& event) override;

 private:
  std::int64_t log_interval_;
  std::int64_t first_step_;
  const dist::Communicator& comm_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Stops the run (exit 3) after trainer.max_consecutive_nonfinite non-finite steps in a row.
class NonFiniteGuard final : public Callback {
 public:
  // `comm`: the ranks verify the last good checkpoint together (checkpoint.h).
  NonFiniteGuard(std::int64_t limit, std::string checkpoints_dir, dist::Communicator& comm)
      : limit_(limit), checkpoints_dir_(std::move(checkpoints_dir)), comm_(comm) {}
  void on_step_end(StepEvent& event) override;

 private:
  std::int64_t limit_;
  std::string checkpoints_dir_;
  dist::Communicator& comm_;
};

// Checkpoints: periodic saves (trainer.save_interval), and the saves, resume and stage start the
// trainer asks for. Owns what goes into state.json.
class CheckpointCallback final : public Callback {
 public:
  CheckpointCallback(const RunConfig& config, model::Olmo3Model& model, optim::Optimizer& optimizer,
                     data::Loader& loader, TrainStep& step, RunCounters& counters,
                     dist::Communicator& comm);
  void on_step_end(StepEvent& event) override;

  // A checkpoint's kind: kept (under keep_last), ephemeral (removed once a newer one verifies;
  // marked "ephemeral": true in its state.json) or the run's last (kept, said so in the log).
  enum class SaveKind { kKept, kEphemeral, kFinal };
  // Writes a checkpoint of the current step (not twice for the same step).
  void save(SaveKind kind);
  // Resumes from the run directory's newest valid checkpoint; false when there is none.
  bool resume();
  // AI2's stage start: weights (and Adam moments) from trainer.load_path, fresh trainer state.
  void load_stage_start();
  const std::string& checkpoints_dir() const { return checkpoints_dir_; }

 private:
  nlohmann::json state_json(SaveKind kind) const;
  nlohmann::json load(const std::string& dir, bool with_optimizer);

  const RunConfig& config_;
  model::Olmo3Model& model_;
  optim::Optimizer& optimizer_;
  data::Loader& loader_;
  TrainStep& step_;
  RunCounters& counters_;
  dist::Communicator& comm_;
  std::string checkpoints_dir_;
  std::int64_t last_saved_step_ = -1;
};

}  // namespace tandem::train
