#include "tandem/dist/dist_config.h"

#include "tandem/core/error.h"

namespace tandem::dist {

Strategy parse_strategy(const std::string& value, const std::string& where) {
  if (value == "ddp") return Strategy::kDdp;
  if (value == "zero1") return Strategy::kZero1;
  if (value == "fsdp") return Strategy::kFsdp;
  if (value == "hsdp") return Strategy::kHsdp;
  core::fail("{}: unknown strategy '{}' (expected ddp, zero1, fsdp or hsdp)", where, value);
}

DistConfig read_dist_config(io::ConfigSection s) {
  DistConfig c;
  c.strategy = parse_strategy(s.get_string("strategy", "ddp"), s.where("strategy"));
  c.shard_group_size = s.get_int("shard_group_size", 0);
  TANDEM_CHECK(c.shard_group_size >= 0, "{} must be positive", s.where("shard_group_size"));
  TANDEM_CHECK(c.strategy == Strategy::kHsdp || c.shard_group_size == 0,
               "{} applies to strategy hsdp only", s.where("shard_group_size"));
  TANDEM_CHECK(c.strategy != Strategy::kHsdp || c.shard_group_size > 0,
               "{}: strategy hsdp needs shard_group_size (ranks per shard group)", s.where(""));
  c.prefetch = s.get_bool("prefetch", true);
  c.bucket_mb = s.get_double("bucket_mb", c.bucket_mb);
  TANDEM_CHECK(c.bucket_mb > 0 && c.bucket_mb <= 1 << 20, "{} must be in (0, 1048576] MiB, not {}",
               s.where("bucket_mb"), c.bucket_mb);
  s.finish();
  return c;
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kZero1:
      return "zero1";
    case Strategy::kFsdp:
      return "fsdp";
    case Strategy::kHsdp:
      return "hsdp";
    case Strategy::kDdp:
      break;
  }
  return "ddp";
}

int shard_group_size(const DistConfig& config, int world) {
  switch (config.strategy) {
    case Strategy::kFsdp:
      return world;
    case Strategy::kHsdp:
      TANDEM_CHECK(config.shard_group_size <= world && world % config.shard_group_size == 0,
                   "dist.shard_group_size {} does not divide the world size {}",
                   config.shard_group_size, world);
      return static_cast<int>(config.shard_group_size);
    default:
      return 1;
  }
}

}  // namespace tandem::dist
