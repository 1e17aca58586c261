// The `dist:` section of a run config: how data-parallel ranks share the work. Documented in
// docs/distributed.md.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/io/config.h"

namespace tandem::dist {

enum class Strategy {
  kDdp,    // replicated parameters, gradients and optimiser state; gradients all-reduced
  kZero1,  // replicated parameters and gradients; Adam moments sharded across ranks
  kFsdp,   // parameters, gradients and Adam moments sharded across all ranks (ZeRO-3)
  kHsdp,   // sharded inside groups of shard_group_size ranks, replicated across the groups
};

struct DistConfig {
  Strategy strategy = Strategy::kDdp;
  // hsdp: ranks per shard group (consecutive ranks; it must divide the world size). 0 = unset.
  std::int64_t shard_group_size = 0;
  // fsdp/hsdp: gather the next block's parameters while this one computes.
  bool prefetch = true;
  // ddp on a GPU backend: gradients are summed in buckets of at least this many MiB, each started
  // as the backward completes it (PyTorch DDP's bucket_cap_mb, with its default).
  double bucket_mb = 25.0;
};

// Reads the section (an absent section is the defaults); unknown keys and values are errors.
DistConfig read_dist_config(io::ConfigSection section);
// "ddp", "zero1", "fsdp", "hsdp"; anything else is an error naming `where`.
Strategy parse_strategy(const std::string& value, const std::string& where);
const char* strategy_name(Strategy strategy);
// Ranks that shard one copy of the parameters at world size `world`: 1 (ddp, zero1 parameters),
// world (fsdp) or shard_group_size (hsdp; checked to divide world).
int shard_group_size(const DistConfig& config, int world);

}  // namespace tandem::dist
