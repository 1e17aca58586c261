// The training loop: the OLMo 3 recipe on one process (and, through the Communicator, on several
// data-parallel ranks). One optimiser step per global batch:
//   micro-batches -> loss sum / local non-ignored label count (OLMo-core) -> backward
//   -> gradients averaged over ranks -> global-norm clipping -> skip-step rule -> AdamW
// with held-out evaluation, checkpoints (periodic, on SIGINT/SIGTERM, at the end) and exact resume.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/loader.h"
#include "tandem/dist/communicator.h"
#include "tandem/dist/zero1.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/heldout.h"
#include "tandem/eval/padded_heldout.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/skip_step.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/metrics_log.h"
#include "tandem/train/train_config.h"

namespace tandem {

// Set by the SIGINT/SIGTERM handler; the loop checkpoints and stops at the next step boundary.
extern std::atomic<int> g_stop_signal;
void install_stop_signal_handlers();

struct StepResult {
  double ce_loss = 0.0;
  double z_loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  bool skipped = false;
  bool nonfinite = false;
  std::int64_t tokens = 0;  // global tokens in this step
};

class Trainer {
 public:
  Trainer(RunConfig config, Communicator& comm);
  ~Trainer();
  // Runs to max_steps (or a stop signal); returns the process exit code.
  int run();

  Olmo3Model& model() { return *model_; }
  std::int64_t step() const { return step_; }

 private:
  void initialise_weights();
  bool resume_from_own_checkpoint();
  void load_stage_start();
  StepResult train_step();
  nlohmann::json evaluate();
  nlohmann::json evaluate_downstream_tasks();
  void save(bool final_save);
  // This rank's Adam state as checkpoint slices: whole tensors, or its ZeRO-1 range.
  OptimizerShard optimizer_shard();
  // Loads a checkpoint's weights and (when `with_optimizer`) moments into either optimiser.
  nlohmann::json load_into_model_and_optimizer(const std::string& dir, bool with_optimizer);
  nlohmann::json state_json() const;
  void log(const std::string& line) const;

  RunConfig config_;
  Communicator& comm_;
  std::string run_dir_, checkpoints_dir_;
  std::unique_ptr<Olmo3Model> model_;
  std::unique_ptr<optim::AdamW> optimizer_;  // null under ZeRO-1
  std::unique_ptr<Zero1Optimizer> zero1_;    // trainer.zero1 with more than one rank
  optim::SkipStepRule skip_rule_;
  std::unique_ptr<data::Loader> loader_;
  std::vector<HeldoutSet> heldout_;
  std::unique_ptr<eval::PaddedHeldout> padded_;  // evaluation.padded
  std::unique_ptr<eval::DownstreamSuite> downstream_;
  std::int64_t downstream_interval_ = 0;
  std::unique_ptr<MetricsLog> metrics_;
  std::int64_t step_ = 0;
  std::int64_t tokens_ = 0;
  std::int64_t skipped_steps_ = 0;
  std::int64_t nonfinite_steps_ = 0;
  std::int64_t consecutive_nonfinite_ = 0;
  double peak_gflops_ = 0.0;
  std::int64_t last_saved_step_ = -1;
};

}  // namespace tandem
