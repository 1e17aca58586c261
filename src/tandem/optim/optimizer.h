// The optimiser interface the trainer holds: one object that owns everything between "the local
// gradients are in the model's gradient buffer" and "the parameters are updated": reducing the
// gradients over data-parallel ranks, the global norm and clipping, the AdamW step, the step
// count, and this rank's part of the Adam state for checkpoints. Implementations live in dist/
// (replicated data parallelism, ZeRO-1), so the trainer has no strategy branches.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem::optim {

// One contiguous run of one parameter's Adam moments in host memory (checkpoints).
struct MomentSlice {
  std::string name;                      // parameter name
  std::vector<std::int64_t> shape;       // the whole parameter's shape
  std::int64_t start = 0;                // element offset inside the flattened parameter
  std::span<float> exp_avg, exp_avg_sq;  // the run's values (equal lengths)
};

// What one rank holds of the Adam state, and which checkpoint shard of how many it writes.
struct OptimizerShard {
  std::vector<MomentSlice> slices;
  std::int64_t adam_step = 0;
  int shard = 0;
  int num_shards = 1;  // a replicated optimiser is one shard written by rank 0
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // "replicated", "zero1"

  // The next backward is the step's last (its last micro-batch): an optimiser may start
  // reducing gradients as that backward completes them. reduce_gradients() follows it.
  virtual void last_backward_follows() {}
  // Turns each rank's gradients into the mean over ranks (where this rank needs them).
  virtual void reduce_gradients() = 0;
  // A line for the log on how the last step's gradients were reduced, where there is more to say
  // than the strategy's name (a GPU backend's buckets); empty otherwise.
  virtual std::string describe_reduction() const { return {}; }
  // Global pre-clip L2 norm of the reduced gradients; clips them when max_norm > 0.
  virtual double clip(double max_norm) = 0;
  // One AdamW update with the learning rates of AdamW's lr slots (optim::scheduled_lrs);
  // afterwards every rank holds the updated parameters. A skipped step is not calling this.
  virtual void step(std::span<const double> lrs) = 0;

  virtual std::int64_t step_count() const = 0;
  virtual void set_step_count(std::int64_t step) = 0;

  // This rank's moments as host memory, with its shard position: for saving, read the spans;
  // for loading, fill them and call moments_loaded(). On a backend whose memory the host can
  // address the spans are the moments themselves; otherwise a host staging copy that
  // moments_loaded() uploads. Valid until the next step.
  virtual OptimizerShard moments() = 0;
  virtual void moments_loaded(std::int64_t adam_step) = 0;
  // What this rank writes into a checkpoint's optim/ (spans valid until the next step): its
  // moments() where each rank holds its own part; a replicated optimiser's ranks write their even
  // shares of the flat buffer (dist/flat_split.h), so that no rank writes them all.
  virtual OptimizerShard moments_to_save() { return moments(); }

  // Communication the optimiser runs on communicators of its own (FSDP's shard group and
  // replicas), beyond the trainer's communicator: seconds the calling thread waited for it, and
  // seconds inside those collectives on any thread (prefetch hides part of it behind compute).
  virtual double seconds_waiting_for_collectives() const { return 0.0; }
  virtual double seconds_in_own_collectives() const { return 0.0; }

  // Bytes of Adam moments this rank holds, and what a replicated optimiser would hold.
  virtual std::int64_t moment_bytes() const = 0;
  virtual std::int64_t full_moment_bytes() const = 0;
};

}  // namespace tandem::optim
