// The training loop: the OLMo 3 recipe on one process or on several data-parallel ranks (through
// the Communicator). Composition only: the step itself is TrainStep (labels, divisor,
// micro-batches, optimiser), the data-parallel strategy is the Optimizer the config chooses
// (dist/), and evaluation, metrics, progress, the non-finite guard and checkpoints are callbacks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/data/loader.h"
#include "tandem/dist/communicator.h"
#include "tandem/dist/fsdp.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/optimizer.h"
#include "tandem/train/callbacks.h"
#include "tandem/train/mfu.h"
#include "tandem/train/train_config.h"
#include "tandem/train/train_step.h"

namespace tandem::train {

class Trainer {
 public:
  Trainer(RunConfig config, dist::Communicator& comm);
  ~Trainer();
  // Runs to max_steps (or a stop signal); returns the process exit code.
  int run();

  model::Olmo3Model& model() { return *model_; }
  std::int64_t step() const { return counters_.step; }

 private:
  void initialise_weights();
  void start_fresh();
  void log_memory() const;
  std::int64_t rank_micro_batch_tokens() const;  // tokens per micro-batch on this rank
  // trainer.profile_step: the step's op profile into the run directory and the log; `tokens`:
  // this rank's share of the step.
  void write_op_profile(const kernels::OpProfile& p, std::int64_t step, std::int64_t tokens);
  void log(const std::string& line) const { log_line(comm_, line); }

  RunConfig config_;
  dist::Communicator& comm_;
  std::string run_dir_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<dist::FsdpParameters> sharded_;  // fsdp/hsdp only; outlives the model
  std::unique_ptr<model::Olmo3Model> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<TrainStep> train_step_;
  RunCounters counters_;
  HardwarePeak peak_;
  double state_rss_mb_ = 0.0;  // resident memory the parameters, gradients and moments added
  std::unique_ptr<CheckpointCallback> checkpoints_;
};

}  // namespace tandem::train
