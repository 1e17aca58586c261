// The step-time half of `tandem plan` (train/plan.h): FLOPs executed per token under each recompute
// policy, the collectives of each strategy as ring algorithms over the device's links, and which
// of them the step's compute hides (FSDP prefetch, and on a GPU the gradient sums that overlap the
// last backward). Internal to the planner; its figures are documented in docs/distributed.md.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/model/model_config.h"
#include "tandem/model/recompute.h"
#include "tandem/model/sharded_parameters.h"
#include "tandem/train/plan.h"

namespace tandem::train::plan_detail {

// Parameter elements of the FSDP units in the order the forward uses them (model::parameter_units):
// the embedding, each block, the head (final norm + lm_head), as laid out in the flat buffer
// (alignment included).
struct Units {
  std::vector<model::ParameterUnit> ranges;  // model::parameter_units of the layout
  double embeddings = 0;
  std::vector<double> blocks;
  double head = 0;
  double total = 0;  // the whole flat buffer

  // Elements per rank when every unit is cut into `shards` ranges (dist/fsdp_shards.h): rank 0's
  // ceil(unit / shards) of each, the largest; the whole buffer for one shard.
  double sharded(int shards) const;
};
Units parameter_units(const model::ModelConfig& c);

// Whether FSDP prefetches in this run, as FsdpParameters decides (dist/fsdp.cc) given a
// communicator that allows it: when asked to and the shard group has more than one rank.
bool fsdp_prefetches(const PlanInput& in, int shard_group);

// FLOPs per token that `recompute` runs again in a block's backward with this attention window
// (0: the whole sequence T). Full: the block's forward; selective: its MLP's.
double recomputed_flops(const model::ModelConfig& c, std::int64_t window, std::int64_t T,
                        model::Recompute recompute);

// Fills the plan's time and communication fields (compute_s to mfu, gradient_buckets) from its
// input and the batch shape make_plan has set (shard_group, micro_batches, micro_batch_tokens),
// and adds a note when shard groups span nodes.
void estimate_step_time(const PlanInput& in, const Units& units, Plan& p);

}  // namespace tandem::train::plan_detail
