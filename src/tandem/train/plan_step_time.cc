#include "tandem/train/plan_step_time.h"

#include <algorithm>
#include <cmath>

#include "tandem/dist/device_gradient_reduction.h"
#include "tandem/dist/fsdp_shards.h"
#include "tandem/model/parameters.h"

namespace tandem::train::plan_detail {
namespace {

using model::Recompute;

// Seconds of a ring all-gather or reduce-scatter of `bytes` (the whole tensor) over n ranks.
double ring_seconds(double bytes, int n, double bandwidth, double latency) {
  if (n <= 1) return 0.0;
  return bytes * (n - 1) / n / bandwidth + (n - 1) * latency;
}

double peak_flops(const PlanInput& in) {
  return in.bf16 ? in.device.peak_flops_bf16 : in.device.peak_flops_fp32;
}

// Per token: a block's matmul parameters (q, k, v, o and the SwiGLU MLP's three; 2 FLOPs each
// forward), its attention forward over min(window, T) keys (window 0: all T), and what `recompute`
// runs again in its backward (full: the whole block's forward; selective: the MLP's).
double block_matmul_params(const model::ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  return 2 * d * static_cast<double>(c.q_width()) + 2 * d * static_cast<double>(c.kv_width()) +
         3 * d * static_cast<double>(c.hidden_size);
}
double attention_forward_flops(const model::ModelConfig& c, std::int64_t window, std::int64_t T) {
  return 4 * static_cast<double>(c.n_heads * c.head_dim) *
         static_cast<double>(window == 0 ? T : std::min(window, T));
}
}  // namespace

double recomputed_flops(const model::ModelConfig& c, std::int64_t window, std::int64_t T,
                        Recompute recompute) {
  if (recompute == Recompute::kFull)
    return 2 * block_matmul_params(c) + attention_forward_flops(c, window, T);
  if (recompute == Recompute::kSelective)
    return 2 * 3 * static_cast<double>(c.d_model) * static_cast<double>(c.hidden_size);
  return 0.0;
}

namespace {

// Backward FLOPs per token of each parameter unit, in model::parameter_units' order (the
// embedding, each block, the head): what the backward executes, recompute's repeated forward
// included, before that unit's gradients are complete. Over all units they add up to the
// executed FLOPs less the forward's.
std::vector<double> unit_backward_flops(const model::ModelConfig& c, std::int64_t T,
                                        Recompute recompute) {
  std::vector<double> flops{0.0};  // the embedding's gradient is a scatter, no matmul
  for (std::int64_t w : c.layer_windows)
    flops.push_back(2 * 2 * block_matmul_params(c) + 2 * attention_forward_flops(c, w, T) +
                    recomputed_flops(c, w, T, recompute));
  flops.push_back(2 * 2 * static_cast<double>(c.d_model) *
                  static_cast<double>(c.embedding_size));  // lm_head
  return flops;
}

// The gradient sums of ddp (all-reduce) and zero1 (reduce-scatter) on a GPU backend
// (dist/device_gradient_reduction.h): the trainer's buckets, each summed on the communicator's
// stream once the step's last backward has completed its units, one after another. What runs
// past the end of that backward is exposed: at least the sums of the buckets of block 0 and the
// embedding, which the backward completes last. Assumes the sums do not slow the backward down.
struct BucketedSums {
  double seconds = 0;  // every bucket's sum, back to back
  double bytes = 0;    // sent per rank
  double exposed = 0;  // after the backward's end
  int buckets = 0;
};

// Seconds into the step's last backward at which each unit's backward ends (model::
// parameter_units' order; the backward runs from the head down to the embedding, which ends it),
// each unit's share of the backward's FLOPs at the assumed efficiency.
std::vector<double> unit_backward_ends(const PlanInput& in, double micro_batch_tokens) {
  const std::vector<double> flops = unit_backward_flops(in.model, in.sequence_length, in.recompute);
  const double flop_rate = peak_flops(in) * in.efficiency;
  std::vector<double> ends(flops.size());
  double t = 0;
  for (std::size_t u = flops.size(); u-- > 0;) {
    t += flops[u] * micro_batch_tokens / flop_rate;
    ends[u] = t;
  }
  return ends;
}

BucketedSums bucketed_gradient_sums(const PlanInput& in, const Units& units,
                                    double micro_batch_tokens, double bytes_per_element,
                                    double bandwidth) {
  const std::vector<double> done = unit_backward_ends(in, micro_batch_tokens);
  const double t = done.front();  // the backward's end
  const double bucket_bytes = in.dist.bucket_mb * 1024 * 1024;
  const auto buckets = dist::plan_gradient_buckets(
      units.ranges, std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_bytes / 4)));
  const int W = in.world_size;
  BucketedSums out;
  double free_at = 0;  // when the communicator's stream is done with the previous bucket
  for (const dist::GradientBucket& b : buckets) {
    const double bytes = bytes_per_element * static_cast<double>(b.size());
    const double s = ring_seconds(bytes, W, bandwidth, in.device.collective_step_latency);
    free_at = std::max(done[static_cast<std::size_t>(b.first_unit)], free_at) + s;
    out.seconds += s;
    out.bytes += W > 1 ? bytes * (W - 1) / W : 0.0;
  }
  out.exposed = std::max(0.0, free_at - t);
  out.buckets = static_cast<int>(buckets.size());
  return out;
}

// HSDP's replica sums on a GPU backend (dist/fsdp.h): each unit's range of the gradient shard
// (ceil(unit / S) elements) all-reduced across the replicas, on their communicator's stream, once
// the step's last backward has added the unit's reduce-scatter into the shard. That add waits for
// the unit's pool buffer to be taken again: a block's by the block `block_buffers` later in the
// backward, the head's by the embedding; the rest (the first blocks', the embedding's) at the
// backward's end. The sums run one after another in the order of their adds; what runs past the
// backward's end is exposed. The reduce-scatters are taken as done by the time of the add.
BucketedSums replica_sums_in_backward(const PlanInput& in, const Units& units,
                                      double micro_batch_tokens, int S, int replicas,
                                      double bandwidth, int block_buffers) {
  const std::vector<double> ends = unit_backward_ends(in, micro_batch_tokens);
  const std::size_t L = units.blocks.size();
  // A unit's backward begins where the one before it in the backward (u + 1) ends.
  auto begins = [&](std::size_t u) { return u + 1 < ends.size() ? ends[u + 1] : 0.0; };
  const double end = ends.front();
  std::vector<std::pair<double, double>> adds;  // (when, elements of this rank's range)
  for (std::size_t u = 1; u <= L; ++u) {
    const std::size_t taker = u > static_cast<std::size_t>(block_buffers) ? u - block_buffers : 0;
    adds.emplace_back(taker > 0 ? begins(taker) : end, std::ceil(units.blocks[u - 1] / S));
  }
  adds.emplace_back(begins(0), std::ceil(units.head / S));
  adds.emplace_back(end, std::ceil(units.embeddings / S));
  std::stable_sort(adds.begin(), adds.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  BucketedSums out;
  double free_at = 0;
  for (const auto& [when, elements] : adds) {
    const double bytes = 2 * 4 * elements;  // an all-reduce: reduce-scatter and all-gather
    const double s = ring_seconds(bytes, replicas, bandwidth, in.device.collective_step_latency);
    free_at = std::max(when, free_at) + s;
    out.seconds += s;
    out.bytes += bytes * (replicas - 1) / replicas;
  }
  out.exposed = std::max(0.0, free_at - end);
  out.buckets = static_cast<int>(adds.size());
  return out;
}

}  // namespace

double Units::sharded(int shards) const {
  if (shards <= 1) return total;
  double s = std::ceil(embeddings / shards) + std::ceil(head / shards);
  for (double b : blocks) s += std::ceil(b / shards);
  return s;
}

Units parameter_units(const model::ModelConfig& c) {
  const model::ParameterLayout layout(c);
  Units u;
  u.ranges = model::parameter_units(layout);
  auto size = [](const model::ParameterUnit& r) { return static_cast<double>(r.size()); };
  u.embeddings = size(u.ranges.front());
  for (std::size_t i = 1; i + 1 < u.ranges.size(); ++i) u.blocks.push_back(size(u.ranges[i]));
  u.head = size(u.ranges.back());
  u.total = static_cast<double>(layout.total());
  return u;
}

bool fsdp_prefetches(const PlanInput& in, int shard_group) {
  return in.dist.prefetch && shard_group > 1;
}

void estimate_step_time(const PlanInput& in, const Units& units, Plan& p) {
  const model::ModelConfig& c = in.model;
  const std::int64_t T = in.sequence_length;
  const int W = in.world_size;
  const int S = p.shard_group;
  const int replicas = W / S;
  const double N = static_cast<double>(p.micro_batch_tokens);  // tokens per micro-batch
  const double a = in.bf16 ? 2.0 : 4.0;                        // bytes per compute-weight element
  const int block_buffers = dist::fsdp_block_buffers(fsdp_prefetches(in, S));
  p.model_flops_per_token = c.flops_per_token(T);
  p.olmo_core_flops_per_token = static_cast<double>(c.olmo_core_flops_per_token(T));
  double extra = 0;
  for (std::int64_t w : c.layer_windows) extra += recomputed_flops(c, w, T, in.recompute);
  p.executed_flops_per_token = p.model_flops_per_token + extra;
  const double tokens = static_cast<double>(p.micro_batches * p.micro_batch_tokens);
  const double peak = peak_flops(in);
  p.compute_s = tokens * p.executed_flops_per_token / (peak * in.efficiency);

  const DeviceSpec& dev = in.device;
  auto bandwidth = [&](int group_size, bool consecutive) {
    const bool one_node = consecutive && group_size <= dev.devices_per_node;
    return one_node ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  };
  double overlappable = 0, exposed = 0;
  auto collective = [&](double bytes, int n, double bw, double times, bool hidden) {
    const double s = ring_seconds(bytes, n, bw, dev.collective_step_latency) * times;
    p.comm_bytes += n > 1 ? bytes * (n - 1) / n * times : 0.0;
    p.comm_s += s;
    (hidden ? overlappable : exposed) += s;
  };
  const double mbs = static_cast<double>(p.micro_batches);
  switch (in.dist.strategy) {
    case dist::Strategy::kDdp:
    case dist::Strategy::kZero1: {
      // The gradients' all-reduce (ddp: reduce-scatter + all-gather) or reduce-scatter (zero1):
      // on a GPU backend bucketed and overlapped with the last backward, on the CPU backend after
      // it. ZeRO-1's all-gather of the updated parameters follows the optimiser step.
      const bool zero1 = in.dist.strategy == dist::Strategy::kZero1;
      const double per_element = zero1 ? 4 : 2 * 4;
      if (in.device.backend == "cuda" && W > 1) {
        const BucketedSums sums =
            bucketed_gradient_sums(in, units, N, per_element, bandwidth(W, true));
        p.comm_s += sums.seconds;
        p.comm_bytes += sums.bytes;
        exposed += sums.exposed;
        p.gradient_buckets = sums.buckets;
      } else {
        collective(per_element * units.total, W, bandwidth(W, true), 1, false);
      }
      if (zero1) collective(4 * units.total, W, bandwidth(W, true), 1, false);
      break;
    }
    case dist::Strategy::kFsdp:
    case dist::Strategy::kHsdp: {
      const double bw = bandwidth(S, true);
      const bool hide = in.dist.prefetch;
      // Per micro-batch: forward gathers (the embedding's is never hidden), backward gathers of
      // the blocks not still in the pool from the forward (the last one, two with prefetch; the
      // head stays gathered from its forward to its backward), reduce-scatters (the
      // embedding's, last, is never hidden).
      const std::size_t nb = units.blocks.size();
      const auto kept = std::min<std::size_t>(nb, block_buffers);
      double regathered = 0;
      for (std::size_t l = 0; l + kept < nb; ++l) regathered += units.blocks[l];
      collective(a * units.embeddings, S, bw, mbs, false);
      collective(a * (units.total - units.embeddings), S, bw, mbs, hide);
      collective(a * regathered, S, bw, mbs, hide);
      collective(4 * (units.total - units.embeddings), S, bw, mbs, hide);
      collective(4 * units.embeddings, S, bw, mbs, false);
      // The all-reduce of each shard's gradients across the replicas: on a GPU backend by unit,
      // overlapping the last backward; on the CPU backend whole, after it.
      if (replicas > 1 && in.device.backend == "cuda") {
        const BucketedSums sums = replica_sums_in_backward(
            in, units, N, S, replicas, bandwidth(replicas, false), block_buffers);
        p.comm_s += sums.seconds;
        p.comm_bytes += sums.bytes;
        exposed += sums.exposed;
        p.gradient_buckets = sums.buckets;
      } else if (replicas > 1) {
        collective(2 * 4 * units.sharded(S), replicas, bandwidth(replicas, false), 1, false);
      }
      break;
    }
  }
  p.exposed_comm_s = exposed + std::max(0.0, overlappable - p.compute_s);
  p.step_s = p.compute_s + p.exposed_comm_s;
  p.step_no_overlap_s = p.compute_s + p.comm_s;
  p.tokens_per_s_per_device = tokens / p.step_s;
  p.mfu = p.tokens_per_s_per_device * p.model_flops_per_token / peak;
  p.mfu_olmo_core = p.tokens_per_s_per_device * p.olmo_core_flops_per_token / peak;
  if (in.dist.strategy == dist::Strategy::kHsdp && S > dev.devices_per_node)
    p.notes.push_back("shard groups span nodes: gathers run at the inter-node bandwidth");
}

}  // namespace tandem::train::plan_detail
