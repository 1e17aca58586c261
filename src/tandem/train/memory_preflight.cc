#include "tandem/train/memory_preflight.h"

#include <algorithm>

#include <fmt/format.h>

#include "tandem/core/error.h"

namespace tandem::train {
namespace {

// One change of the run's config that fits, as the override that makes it, and its plan.
struct Alternative {
  std::string override_text;
  Plan plan;
};

// `current` is the plan of `in`.
std::vector<Alternative> fitting_alternatives(const PlanInput& in, const Plan& current,
                                              double available) {
  std::vector<Alternative> out;
  // Recompute and sharding, one at a time and together (plan_alternatives' grid); with one rank
  // there is nothing to shard over.
  for (const Plan& p : plan_alternatives(in)) {
    const bool same_strategy = p.input.dist.strategy == in.dist.strategy;
    const bool same_recompute = p.input.recompute == in.recompute;
    if ((same_strategy && same_recompute) || (!same_strategy && in.world_size == 1)) continue;
    if (p.backend_bytes > available) continue;
    std::string text;
    if (!same_strategy) {
      text = fmt::format("dist.strategy={}", dist::strategy_name(p.input.dist.strategy));
      if (p.input.dist.strategy == dist::Strategy::kHsdp)
        text += fmt::format(" dist.shard_group_size={}", p.shard_group);
    }
    if (!same_recompute)
      text += fmt::format("{}trainer.recompute={}", text.empty() ? "" : " ",
                          model::recompute_name(p.input.recompute));
    out.push_back({text, p});
  }
  // Smaller micro-batches (the same tokens per step in more of them): the largest that fits.
  const std::int64_t mb = current.micro_batch_tokens / in.sequence_length;
  const std::int64_t per_rank = current.micro_batches * mb;
  for (std::int64_t smaller = mb - 1; smaller >= 1; --smaller) {
    if (per_rank % smaller != 0) continue;
    PlanInput changed = in;
    changed.micro_batch_instances = smaller;
    Plan p = make_plan(changed);
    if (p.backend_bytes > available) continue;
    out.push_back({fmt::format("data.micro_batch_size={}", smaller), std::move(p)});
    break;
  }
  // Fastest first.
  std::stable_sort(out.begin(), out.end(), [](const Alternative& a, const Alternative& b) {
    return a.plan.step_s < b.plan.step_s;
  });
  return out;
}

}  // namespace

PlanInput plan_input_of(const RunConfig& config, int world_size, const DeviceSpec& device) {
  PlanInput in;
  in.source = config.source;
  in.model = config.model;
  in.sequence_length = config.data.sequence_length;
  in.global_batch_instances = config.data.instances_per_batch();
  in.micro_batch_instances = config.data.micro_batch_size;
  in.world_size = world_size;
  in.dist = config.dist;
  in.recompute = config.trainer.recompute;
  in.bf16 = config.precision == model::Precision::kBf16;
  in.intra_document = config.data.generate_doc_lengths;
  in.device = device;
  return in;
}

DeviceSpec device_spec_of(const kernels::Backend& backend) {
  const kernels::MemoryStats m = backend.memory_stats();
  TANDEM_CHECK(m.device_total > 0, "backend '{}' reports no device memory", backend.name());
  DeviceSpec d = device_spec("h200");  // the only GPU backend's device family (sm_90a)
  d.name = backend.name();
  d.memory_bytes = static_cast<double>(m.device_free + m.reserved);
  d.reserve_bytes = 0;
  d.source = fmt::format("{} free and {} held by tandem's allocator, of {} in all",
                         bytes_text(static_cast<double>(m.device_free)),
                         bytes_text(static_cast<double>(m.reserved)),
                         bytes_text(static_cast<double>(m.device_total)));
  return d;
}

std::vector<std::string> check_device_memory(const RunConfig& config,
                                             const kernels::Backend& backend,
                                             dist::Communicator& comm) {
  if (backend.memory_stats().device_total <= 0) return {};  // host memory: the CPU backend
  DeviceSpec device = device_spec_of(backend);
  const int world_size = comm.world_size();
  if (world_size > 1) {
    // Each rank's room, summed into its own slot (exact: one term per slot).
    std::vector<double> rooms(static_cast<std::size_t>(world_size), 0.0);
    rooms[static_cast<std::size_t>(comm.rank())] = device.memory_bytes;
    comm.all_reduce_sum(rooms.data(), rooms.size());
    const auto least = std::min_element(rooms.begin(), rooms.end());
    const auto tightest = static_cast<int>(least - rooms.begin());
    if (tightest == comm.rank())
      device.source += fmt::format("; the least of the {} ranks' devices", world_size);
    else
      device.source =
          fmt::format("on rank {}'s device, the least of the {} ranks'; this rank's has {}",
                      tightest, world_size, bytes_text(device.memory_bytes));
    device.memory_bytes = *least;
  }
  const PlanInput in = plan_input_of(config, world_size, device);
  Plan plan;
  try {
    plan = make_plan(in);
  } catch (const core::Error& e) {
    return {fmt::format("memory plan: not made ({})", e.what())};
  }
  std::vector<std::string> lines{fmt::format(
      "memory plan (as `tandem plan`): {:.0f} B ({}) of device memory per rank at the step's "
      "peak; the device has room for {:.0f} B ({}: {})",
      plan.backend_bytes, bytes_text(plan.backend_bytes), device.memory_bytes,
      bytes_text(device.memory_bytes), device.source)};
  if (plan.attention_falls_back)
    lines.push_back(
        "memory plan: no room for cuDNN's deterministic attention backward workspace: the "
        "attention runs on tandem's kernels (slower)");
  if (plan.attention_backward_pieces > 1)
    lines.push_back(fmt::format(
        "memory plan: no room for cuDNN's deterministic attention backward workspace at once: "
        "the backward runs in {} pieces",
        plan.attention_backward_pieces));
  if (plan.backend_bytes <= device.memory_bytes) return lines;
  std::string warning = fmt::format(
      "WARNING: this run needs {} more device memory per rank than the device has room for: "
      "its first step is likely to run out of memory.",
      bytes_text(plan.backend_bytes - device.memory_bytes));
  const std::vector<Alternative> fitting = fitting_alternatives(in, plan, device.memory_bytes);
  const std::size_t shown = std::min<std::size_t>(fitting.size(), 4);
  if (shown == 0)
    warning += " No other strategy, recompute policy or micro-batch size fits at this world size.";
  else
    warning += " These would fit (fastest first):";
  for (std::size_t i = 0; i < shown; ++i)
    warning += fmt::format(" `{}` ({}){}", fitting[i].override_text,
                           bytes_text(fitting[i].plan.backend_bytes), i + 1 < shown ? ";" : ".");
  warning += " `tandem plan CONFIG --device h200` compares every choice.";
  lines.push_back(warning);
  return lines;
}

}  // namespace tandem::train
