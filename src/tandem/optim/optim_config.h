// The `optim:` section of a training config: AdamW hyper-parameters, the skip-step rule, gradient
// clipping and z-loss, with OLMo-core's names and the OLMo 3 recipe as defaults. Every key is
// documented in docs/optimizer.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/io/config.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/schedule.h"
#include "tandem/optim/skip_step.h"

namespace tandem::optim {

struct OptimConfig {
  double lr = 3e-4;  // peak lr, the schedule's initial_lr
  AdamWHyper adamw;
  bool skip_step = true;                           // name: skip_step_adamw (true) or adamw (false)
  SkipStepOptions skip;                            // used when skip_step
  std::optional<double> max_grad_norm = 1.0;       // null: no clipping
  std::optional<double> z_loss_multiplier = 1e-5;  // null: no z-loss
};

// The learning rates of global step `step` for AdamW's lr slots (AdamWHyper::lr_slots): each
// group override's own lr through the schedule, where it gives one, and the optimiser's `lr`
// through the schedule for the last slot (and the groups without their own), as OLMo-core's train
// module sets every param group's lr from its initial_lr. Arguments as scheduled_lr's.
std::vector<double> scheduled_lrs(const OptimConfig& config, const Schedule& schedule,
                                  std::int64_t step, const TrainingHorizon& horizon);

// Reads and validates the section (strict: unknown keys are an error naming them).
OptimConfig read_optim_config(io::ConfigSection section);

}  // namespace tandem::optim
