// The `dist:` section of a run config: how data-parallel ranks share the work. Documented in
// docs/distributed.md.
#pragma once

#include <string>

#include "tandem/io/config.h"

namespace tandem::dist {

enum class Strategy {
  kDdp,    // replicated parameters, gradients and optimiser state; gradients all-reduced
  kZero1,  // replicated parameters and gradients; Adam moments sharded across ranks
};

struct DistConfig {
  Strategy strategy = Strategy::kDdp;
};

// Reads the section (an absent section is the defaults); unknown keys and values are errors.
DistConfig read_dist_config(io::ConfigSection section);
const char* strategy_name(Strategy strategy);

}  // namespace tandem::dist
