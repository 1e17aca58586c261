// `tandem plan`'s report: the text (format_plan, format_alternatives) and the JSON (--json).
#include "tandem/train/plan.h"

#include <fmt/format.h>

namespace tandem::train {

std::string bytes_text(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

std::string format_plan(const Plan& p) {
  const PlanInput& in = p.input;
  const model::ModelConfig& c = in.model;
  std::string out;
  out += fmt::format("plan for {}: {:.3g}B parameters, {} layers, d_model {}, sequence {}\n",
                     in.source, static_cast<double>(c.total_params()) / 1e9, c.n_layers, c.d_model,
                     in.sequence_length);
  out += fmt::format("device: {} x {} ({})\n", in.world_size, in.device.name, in.device.source);
  out += fmt::format(
      "run: strategy {}{}, precision {}, recompute {}, {} micro-batch(es) of {} tokens per rank "
      "and step ({} tokens per step)\n",
      dist::strategy_name(in.dist.strategy),
      p.shard_group > 1 && p.shard_group < in.world_size
          ? fmt::format(" ({} groups of {})", in.world_size / p.shard_group, p.shard_group)
          : std::string(),
      in.bf16 ? "bf16" : "fp32", model::recompute_name(in.recompute), p.micro_batches,
      p.micro_batch_tokens, p.micro_batch_tokens * p.micro_batches * in.world_size);
  out += "\nmemory per rank (at the step's peak)\n";
  for (const MemoryItem& m : p.memory)
    out += fmt::format("  {:<22} {:>10}   {}\n", m.name, bytes_text(m.bytes), m.detail);
  out +=
      fmt::format("  {:<22} {:>10}   the backend's buffers (the trainer logs the measured peak)\n",
                  "held by the backend", bytes_text(p.backend_bytes));
  out +=
      fmt::format("  {:<22} {:>10}   {} of {} on the device\n", "total", bytes_text(p.total_bytes),
                  p.fits ? "fits" : "DOES NOT FIT", bytes_text(in.device.memory_bytes));
  out += "\ncheckpoint (each save)\n";
  out += fmt::format("  {:<22} {:>10}   fp32 weights and Adam moments, 12 B per parameter\n",
                     "size", bytes_text(p.checkpoint_bytes));
  out += fmt::format(
      "  {:<22} {:>10}   {}\n", "per writing rank", bytes_text(p.checkpoint_bytes_per_writer),
      p.checkpoint_writers == 1 ? std::string("one process writes it all")
      : p.checkpoint_writers < in.world_size
          ? fmt::format("the largest share of the first shard group's {} ranks (the other groups "
                        "hold copies and write none)",
                        p.checkpoint_writers)
          : fmt::format("the largest of {} ranks' shares", p.checkpoint_writers));
  out += "\nstep time (per optimiser step)\n";
  out += fmt::format(
      "  compute        {:>9.3f} s   {:.3g} FLOP/token executed ({:.3g} model, {:.3g} in "
      "OLMo-core's causal count), {:.0f} % of peak assumed\n",
      p.compute_s, p.executed_flops_per_token, p.model_flops_per_token, p.olmo_core_flops_per_token,
      100 * in.efficiency);
  out += fmt::format("  communication  {:>9.3f} s   {} sent per rank; {:.3f} s not hidden\n",
                     p.comm_s, bytes_text(p.comm_bytes), p.exposed_comm_s);
  if (p.gradient_buckets > 0 && in.dist.strategy == dist::Strategy::kHsdp)
    out += fmt::format(
        "                               replica sums in {} unit ranges, each started as the last "
        "backward adds it into the shard\n",
        p.gradient_buckets);
  else if (p.gradient_buckets > 0)
    out += fmt::format(
        "                               gradient sums in {} buckets, each started as the last "
        "backward completes it\n",
        p.gradient_buckets);
  out += fmt::format("  step           {:>9.3f} s   ({:.3f} s without overlap)\n", p.step_s,
                     p.step_no_overlap_s);
  out += fmt::format(
      "  throughput     {:>9.0f} tokens/s per device, MFU {:.1f} % ({:.1f} % in OLMo-core's "
      "count)\n",
      p.tokens_per_s_per_device, 100 * p.mfu, 100 * p.mfu_olmo_core);
  for (const std::string& n : p.notes) out += "note: " + n + "\n";
  return out;
}

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["config"] = p.input.source;
  j["device"] = p.input.device.name;
  j["world_size"] = p.input.world_size;
  j["strategy"] = dist::strategy_name(p.input.dist.strategy);
  j["shard_group_size"] = p.shard_group;
  j["precision"] = p.input.bf16 ? "bf16" : "fp32";
  j["sequence_length"] = p.input.sequence_length;
  j["recompute"] = model::recompute_name(p.input.recompute);
  j["intra_document"] = p.input.intra_document;
  j["micro_batches"] = p.micro_batches;
  j["micro_batch_tokens"] = p.micro_batch_tokens;
  for (const MemoryItem& m : p.memory) j["memory"][m.name] = m.bytes;
  j["memory_total"] = p.total_bytes;
  j["memory_backend"] = p.backend_bytes;
  j["device_memory"] = p.input.device.memory_bytes;
  j["fits"] = p.fits;
  j["compute_s"] = p.compute_s;
  j["comm_s"] = p.comm_s;
  j["comm_bytes"] = p.comm_bytes;
  j["checkpoint"] = {{"bytes", p.checkpoint_bytes},
                     {"writers", p.checkpoint_writers},
                     {"bytes_per_writer", p.checkpoint_bytes_per_writer}};
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["gradient_buckets"] = p.gradient_buckets;
  j["step_s"] = p.step_s;
  j["step_no_overlap_s"] = p.step_no_overlap_s;
  j["tokens_per_s_per_device"] = p.tokens_per_s_per_device;
  j["model_flops_per_token"] = p.model_flops_per_token;
  j["executed_flops_per_token"] = p.executed_flops_per_token;
  j["olmo_core_flops_per_token"] = p.olmo_core_flops_per_token;
  j["mfu"] = p.mfu;
  j["mfu_olmo_core"] = p.mfu_olmo_core;
  j["efficiency"] = p.input.efficiency;
  j["notes"] = p.notes;
  return j;
}

std::string format_alternatives(const std::vector<Plan>& plans) {
  std::string out =
      "\nalternatives at this world size (memory per rank; the fastest that fits is marked *)\n";
  out += fmt::format("  {:<14} {:<10} {:>10} {:>5} {:>9} {:>14} {:>6}\n", "strategy", "recompute",
                     "memory", "fits", "step s", "tokens/s/dev", "MFU");
  const Plan* best = nullptr;
  for (const Plan& p : plans)
    if (p.fits && (!best || p.step_s < best->step_s)) best = &p;
  for (const Plan& p : plans) {
    const std::string strategy =
        p.input.dist.strategy == dist::Strategy::kHsdp
            ? fmt::format("hsdp {}x{}", p.input.world_size / p.shard_group, p.shard_group)
            : dist::strategy_name(p.input.dist.strategy);
    out += fmt::format("{} {:<14} {:<10} {:>10} {:>5} {:>9.3f} {:>14.0f} {:>5.1f}%\n",
                       &p == best ? "*" : " ", strategy, model::recompute_name(p.input.recompute),
                       bytes_text(p.total_bytes), p.fits ? "yes" : "no", p.step_s,
                       p.tokens_per_s_per_device, 100 * p.mfu);
  }
  return out;
}

}  // namespace tandem::train
