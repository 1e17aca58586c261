// The run config of `tandem train`: model, data, optimiser, schedule, trainer and evaluation
// sections of one YAML file (key=value overrides on the command line). Every key is documented in
// docs/config.md; unknown keys are errors naming the key.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/dist/dist_config.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/padded_heldout.h"
#include "tandem/io/config.h"
#include "tandem/model/model_config.h"
#include "tandem/model/precision.h"
#include "tandem/model/recompute.h"
#include "tandem/optim/optim_config.h"
#include "tandem/optim/schedule.h"

namespace tandem::train {

struct HeldoutSetConfig {
  std::string name;
  std::vector<std::string> files;  // expanded token files
};

struct EvalConfig {
  std::int64_t interval = 0;        // steps between held-out evaluations (0 = only at the end)
  std::int64_t max_instances = 64;  // first N instances of each set (fixed across evaluations)
  std::int64_t batch_instances = 8;
  // Every configured evaluation once more before the first step of each process (OLMo-core's
  // eval_on_startup): the starting weights, e.g. a checkpoint just moved to other hardware.
  bool on_startup = false;
  std::vector<HeldoutSetConfig> sets;                // chunked held-out sets (eval/heldout.h)
  std::optional<eval::PaddedHeldoutConfig> padded;   // AI2's padded sets (eval/padded_heldout.h)
  std::optional<eval::DownstreamConfig> downstream;  // evaluation.downstream (eval/ parses it)
};

// OLMo-core's Duration: a number of optimiser steps, tokens or epochs.
struct Duration {
  enum class Unit { kSteps, kTokens, kEpochs };
  std::int64_t value = 0;
  Unit unit = Unit::kSteps;
  // The global step at which it is due (OLMo-core's Duration.due): steps >= value, tokens seen >=
  // value (batches of `batch_tokens`), or the last batch of epoch `value` done.
  std::int64_t due_step(std::int64_t batch_tokens, std::int64_t batches_per_epoch) const;
};

struct TrainerConfig {
  std::string save_folder;            // the run directory
  Duration max_duration;              // `max_steps: N` is {N, steps}
  std::optional<Duration> hard_stop;  // the run ends there if it comes first
  // Resolved from the two for global batches of `batch_tokens` tokens (resolve_durations): the
  // step the run trains to, max_duration's or the hard stop's where that comes first, and the
  // schedule's horizon, max_duration's (OLMo-core's Trainer.max_steps/max_tokens). A duration in
  // epochs is resolved once the data is indexed (the trainer does); until then max_steps is 0.
  std::int64_t max_steps = 0;
  optim::TrainingHorizon horizon;
  bool needs_batches_per_epoch() const;
  void resolve_durations(std::int64_t batch_tokens, std::int64_t batches_per_epoch);
  std::int64_t save_interval = 0;  // 0 = only at the end (and on a signal)
  std::int64_t keep_last = 3;      // checkpoints kept (ephemeral ones aside)
  // OLMo-core's ephemeral_save_interval: also a checkpoint every N steps (0: none), removed as
  // soon as a newer checkpoint has been saved and verifies.
  std::int64_t ephemeral_save_interval = 0;
  std::int64_t log_interval = 1;
  std::uint64_t init_seed = 0;       // weight initialisation
  std::string init_from;             // model dir (HF or tandem) for the initial weights
  std::string load_path;             // stage start: checkpoint whose weights (+ moments) load
  bool load_optimizer_state = true;  // with load_path: Adam moments too (AI2 stage 2)
  std::int64_t max_consecutive_nonfinite = 5;
  std::optional<double> peak_tflops;  // MFU denominator per device; default: the backend's peak
  bool save_initial = false;          // write step-000000 before training (for references)
  bool progress = true;               // console progress line
  // Start from step 0 instead of resuming: the run directory's checkpoints and metrics.jsonl
  // move to <save_folder>/previous-N/. Without it, a directory whose checkpoints all fail
  // verification is an error (never a silent restart).
  bool fresh_start = false;
  // Activation recompute (OLMo-core's activation checkpointing): none, full or selective.
  model::Recompute recompute = model::Recompute::kNone;
  // Times this step's backend ops (kernels/op_profile.h) into
  // <save_folder>/profile/step-NNNNNN.rank-R.json and the log; 0: no step.
  std::int64_t profile_step = 0;
};

struct RunConfig {
  std::string source;           // config path
  std::string backend = "cpu";  // kernels/backend.h: cpu (cuda arrives with its own backend)
  model::Precision precision = model::Precision::kFp32;  // model/precision.h, docs/precision.md
  model::ModelConfig model;
  data::DataConfig data;
  optim::OptimConfig optim;  // optim/optim_config.h, docs/optimizer.md
  std::unique_ptr<optim::Schedule> schedule;
  YAML::Node schedule_yaml;
  dist::DistConfig dist;  // dist/dist_config.h, docs/distributed.md
  TrainerConfig trainer;
  EvalConfig eval;
  YAML::Node resolved;  // the whole config after overrides, written to the run directory
};

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace tandem::train
