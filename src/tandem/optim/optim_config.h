// The `optim:` section of a training config: AdamW hyper-parameters, the skip-step rule, gradient
// clipping and z-loss, with OLMo-core's names and the OLMo 3 recipe as defaults. Every key is
// documented in docs/optimizer.md.
#pragma once

#include <optional>
#include <string>

#include "tandem/io/config.h"
#include "tandem/optim/adamw.h"
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

// Reads and validates the section (strict: unknown keys are an error naming them).
OptimConfig read_optim_config(io::ConfigSection section);

}  // namespace tandem::optim
