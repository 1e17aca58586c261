// One optimiser step, in one place (OLMo-core's TrainModule): labels, the instance-filter mask,
// the loss divisor, micro-batching and z-loss, then the optimiser's reduce, clip, skip-step
// decision and update. Built on optim/loss_normalization (make_labels, loss_divisor, BatchLoss),
// which is checked against OLMo-core's train module:
//   labels   = make_labels(input_ids, mask)          shift left; last position and every
//                                                    position of a rejected instance ignored
//   divisor  = loss_divisor(labels, mask)            kept labels + seq_len per rejected instance
//   for each micro-batch: forward/backward of (ce_sum + z * z_sum) / divisor
//   optimizer: reduce over ranks, clip (pre-clip norm logged), skip-step rule, AdamW
// The logged losses are each rank's ce_sum / divisor averaged over ranks, as OLMo-core's metric
// reduction does.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/data/loader.h"
#include "tandem/dist/communicator.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/optim_config.h"
#include "tandem/optim/optimizer.h"
#include "tandem/optim/schedule.h"
#include "tandem/optim/skip_step.h"

namespace tandem::train {

struct StepResult {
  double ce_loss = 0.0;
  double z_loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;          // the optimiser's (parameters outside any group with an lr)
  std::vector<double> lrs;  // every lr slot's (optim::scheduled_lrs), lr the last
  bool skipped = false;
  bool nonfinite = false;
  std::int64_t tokens = 0;  // global tokens in this step
};

struct StepOptions {
  std::int64_t micro_batch_instances = 0;  // 0 = the rank's whole batch at once
  optim::TrainingHorizon horizon;          // the schedule's t_max (steps, tokens) and batch tokens
  // OLMo-core's generate_doc_lengths: attention (and RoPE positions) inside each document of a
  // packed instance, documents ending at EOS (model/documents.h).
  bool intra_document = false;
  std::int64_t eos_token_id = 0;
  std::optional<std::int64_t> bos_token_id;
};

class TrainStep {
 public:
  TrainStep(model::Olmo3Model& model, optim::Optimizer& optimizer, const optim::OptimConfig& optim,
            const optim::Schedule& schedule, dist::Communicator& comm, StepOptions options);

  // Trains on this rank's share of global step `step` (1-based, OLMo-core's global_step).
  StepResult run(const data::Batch& batch, std::int64_t step);

  optim::SkipStepRule& skip_rule() { return skip_rule_; }

 private:
  model::Olmo3Model& model_;
  optim::Optimizer& optimizer_;
  const optim::OptimConfig& optim_;
  const optim::Schedule& schedule_;
  dist::Communicator& comm_;
  StepOptions options_;
  optim::SkipStepRule skip_rule_;
};

}  // namespace tandem::train
