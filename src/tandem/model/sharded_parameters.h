// The seam for sharded parameters (FSDP/ZeRO-3, dist/fsdp.h): a model built with a
// ShardedParameters owns no whole parameter or gradient buffer. Around each unit's forward and
// backward it asks for the unit's weights (gathered into a pooled buffer in the compute dtype) and
// for a buffer for the unit's gradients (handed back right after the unit's backward, to be
// reduce-scattered into the shard), and points its typed views at them.
//
// Units, in the order the forward uses them (the planner's, train/plan_step_time.h): 0 the
// embedding table, 1 + l block l (its first to its last tensor in the layout, inner alignment gaps
// included), n_layers + 1 the head (lm_head.norm and lm_head.w_out). The alignment gaps between
// units belong to none: they are zero for good.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/kernels/tensor.h"
#include "tandem/model/parameters.h"

namespace tandem::model {

struct ParameterUnit {
  std::int64_t begin = 0, end = 0;  // elements [begin, end) of the flat layout
  std::int64_t size() const { return end - begin; }
};
std::vector<ParameterUnit> parameter_units(const ParameterLayout& layout);

// One contiguous run of one parameter's values in host memory (the masters a rank holds).
struct WeightSlice {
  std::string name;                 // parameter name
  std::vector<std::int64_t> shape;  // the whole parameter's shape
  std::int64_t start = 0;           // element offset inside the flattened parameter
  std::span<float> values;
};

// What a rank holds of the fp32 masters, and which checkpoint shard of how many it writes (ranks
// whose shard is >= num_shards, HSDP's replicas, write none).
struct WeightShard {
  std::vector<WeightSlice> slices;
  int shard = 0;
  int num_shards = 1;
};

class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;

  // A pass over the units starts: a forward, followed by a backward when `backward_follows`
  // (the head's gather then prefetches the last block's).
  virtual void begin_pass(bool backward_follows) = 0;
  // Unit `unit`'s weights, elements [begin, end) of the layout in the compute dtype, gathered;
  // valid until release(unit). `backward`: acquired for the unit's backward (and recompute).
  virtual kernels::Tensor acquire(int unit, bool backward) = 0;
  virtual void release(int unit) = 0;
  // A zeroed fp32 buffer for the unit's gradients ([begin, end) of the layout), until
  // gradient_done(unit) hands it back: then it is summed over the ranks into the gradient shard.
  virtual kernels::Tensor gradient(int unit) = 0;
  virtual void gradient_done(int unit) = 0;
  // Waits for every collective the pass started (the caller may then use the communicator).
  virtual void end_pass() = 0;

  // The compute dtype of acquire()'s buffers (the model's activation dtype).
  virtual void set_compute_dtype(kernels::DType dtype) = 0;
  virtual void zero_grads() = 0;
  // This rank's masters as host memory, to initialise, save or load them: the values themselves
  // on a host-addressable backend, else a copy made by this call; after writing into it, call
  // weights_written() to put the values where the masters live.
  virtual WeightShard weights() = 0;
  virtual void weights_written() {}
  // The checkpoint shard this rank writes, and how many there are (WeightShard's two numbers).
  virtual int checkpoint_shard() const = 0;
  virtual int checkpoint_shards() const = 0;
  // Bytes this rank holds: fp32 master and gradient shards, the pools of gathered weights and of
  // unit gradients.
  virtual std::int64_t master_bytes() const = 0;
  virtual std::int64_t gradient_bytes() const = 0;
  virtual std::int64_t gathered_weight_bytes() const = 0;
  virtual std::int64_t unit_gradient_bytes() const = 0;
  // Ranks that share one copy of the parameters.
  virtual int shard_group_size() const = 0;
};

}  // namespace tandem::model
