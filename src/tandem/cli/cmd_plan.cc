// `tandem plan CONFIG [key=value ...] [--world-size N] [--device h200|h100|cpu] [--strategy S]
// [--shard-group-size G] [--recompute R] [--micro-batch M] [--precision P] [--efficiency F]
// [--json]`: per-rank memory and the estimated step time of a run before running it
// (train/plan.h). Flags override what the config says.
#include <fmt/format.h>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/model/precision.h"
#include "tandem/train/plan.h"

namespace tandem::cli {

void add_plan_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    int world_size = 1;
    std::string device = "h200";
    std::string strategy, recompute, precision;
    std::int64_t shard_group_size = 0;
    std::int64_t micro_batch = 0;
    double efficiency = 0.4;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Per-rank memory and estimated step time of a run config on N devices");
  cmd->add_option("config", o->config, "Run or model config (YAML)")->required();
  cmd->add_option("overrides", o->overrides, "key=value overrides, e.g. data.sequence_length=4096");
  cmd->add_option("--world-size", o->world_size, "Data-parallel ranks (devices)");
  cmd->add_option("--device", o->device, "h200, h100 (SXM) or cpu (this machine)");
  cmd->add_option("--strategy", o->strategy, "ddp, zero1, fsdp or hsdp (default: the config's)");
  cmd->add_option("--shard-group-size", o->shard_group_size, "hsdp: ranks per shard group");
  cmd->add_option("--recompute", o->recompute, "none, selective or full (default: the config's)");
  cmd->add_option("--micro-batch", o->micro_batch, "Instances per micro-batch and rank");
  cmd->add_option("--precision", o->precision, "fp32 or bf16 (default: the config's)");
  cmd->add_option("--efficiency", o->efficiency,
                  "Fraction of the device's peak the executed FLOPs reach (default 0.4)");
  cmd->add_flag("--json", o->json, "One JSON object instead of the text");
  cmd->callback([o, &exit_code] {
    train::PlanInput in = train::read_plan_input(o->config, o->overrides);
    in.world_size = o->world_size;
    in.device = train::device_spec(o->device);
    if (!o->strategy.empty()) {
      in.dist.strategy = dist::parse_strategy(o->strategy, "--strategy");
      if (in.dist.strategy != dist::Strategy::kHsdp) in.dist.shard_group_size = 0;
    }
    if (o->shard_group_size > 0) in.dist.shard_group_size = o->shard_group_size;
    if (in.dist.strategy == dist::Strategy::kHsdp && in.dist.shard_group_size == 0)
      in.dist.shard_group_size = std::min(o->world_size, in.device.devices_per_node);
    if (!o->recompute.empty()) in.recompute = model::parse_recompute(o->recompute, "--recompute");
    if (o->micro_batch > 0) in.micro_batch_instances = o->micro_batch;
    if (!o->precision.empty())
      in.bf16 = model::parse_precision(o->precision) == model::Precision::kBf16;
    TANDEM_CHECK(o->efficiency > 0 && o->efficiency <= 1, "--efficiency {} must be in (0, 1]",
                 o->efficiency);
    in.efficiency = o->efficiency;
    const train::Plan plan = train::make_plan(in);
    if (o->json) {
      fmt::print("{}\n", train::plan_to_json(plan).dump(1));
    } else {
      fmt::print("{}", train::format_plan(plan));
      fmt::print("{}", train::format_alternatives(train::plan_alternatives(in)));
    }
    exit_code = 0;
  });
}

}  // namespace tandem::cli
