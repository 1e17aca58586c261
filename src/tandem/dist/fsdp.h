// FSDP (ZeRO-3) and HSDP for data-parallel training (docs/distributed.md).
//
// FsdpParameters holds this rank's shard (dist/fsdp_shards.h) of the fp32 master parameters and
// of the fp32 gradients, and serves the model's units (model/sharded_parameters.h): before a
// unit's forward or backward it all-gathers the unit's weights over the shard group into a pooled
// buffer in the compute dtype (under bf16 every rank casts its own range to bf16, then the bf16
// values are gathered: the same bits as casting the whole masters); right after the unit's
// backward it reduce-scatters the unit's fp32 gradient over the group (each range summed in rank
// order on its owner) and adds this rank's range into its gradient shard. With several
// micro-batches the gradient is reduce-scattered after each micro-batch's backward and
// accumulated in the shard: keeping a whole unit gradient across micro-batches would need every
// unit's full gradient per rank, the memory FSDP exists to save.
//
// Pools: one buffer for the embedding or the head (never needed at once), one for a block (two
// with prefetch), and the same for unit gradients: allocated once, never per step. A unit still
// in a pool buffer from earlier in the same pass is used again without a gather (the weights
// change only between passes): the last block's backward reuses its forward's gather.
//
// Prefetch (dist.prefetch): a communication thread runs the unit collectives in the order the
// model asks for them, so the next unit's gather and the last unit's reduce-scatter overlap the
// current unit's compute. It needs a communicator that allows a second thread
// (MPI_THREAD_SERIALIZED); the shard group has its own communicator (a split of the world one)
// and the pass drains the thread before the model returns, so the calling thread and the
// communication thread never use MPI at the same time.
//
// HSDP: shard groups of dist.shard_group_size consecutive ranks; ranks with the same position in
// their groups hold the same shard and all-reduce their gradient shards once per step (rank
// order) before the optimiser step. On a device backend that sum is cut by unit and overlaps the
// step's last backward: once that backward's reduce-scatter of a unit has been added into the
// shard, the unit's range of the shard is all-reduced across the replicas on their
// communicator's stream while the backward goes on (the shard's last units, added at the pass's
// end, are summed after it); the optimiser waits for them.
//
// On a device backend (CUDA, with the NCCL communicator) the same units, pools and order, with
// the collectives on the device: a gather is queued on the communicator's stream behind the
// cast of this rank's range and the unit's compute waits for it there (an event, not the host);
// a unit gradient's reduce onto its owners is queued right after the unit's backward, and its
// owner's range is added into the shard when the buffer is next needed or the pass ends. No
// thread is needed for overlap: prefetch starts the next unit's gather before this unit's compute
// is queued. The pass ends with one host wait for its collectives (under the watchdog). The
// masters are copied through host memory only to initialise, save or load them.
#pragma once

#include <memory>
#include <vector>

#include "tandem/dist/comm_thread.h"
#include "tandem/dist/communicator.h"
#include "tandem/dist/dist_config.h"
#include "tandem/dist/fsdp_shards.h"
#include "tandem/dist/host_moments.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/model_config.h"
#include "tandem/model/sharded_parameters.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/optimizer.h"

namespace tandem::dist {

class FsdpParameters final : public model::ShardedParameters {
 public:
  // Collective over `world` (it splits it into the shard group and, for HSDP, the replicas).
  FsdpParameters(const model::ModelConfig& config, kernels::Backend& backend, Communicator& world,
                 const DistConfig& dist);
  ~FsdpParameters() override;

  void begin_pass(bool backward_follows) override;
  kernels::Tensor acquire(int unit, bool backward) override;
  void release(int unit) override;
  kernels::Tensor gradient(int unit) override;
  void gradient_done(int unit) override;
  void end_pass() override;
  void weights_written() override;
  void set_compute_dtype(kernels::DType dtype) override;
  void zero_grads() override;
  model::WeightShard weights() override;
  int checkpoint_shard() const override;
  int checkpoint_shards() const override { return shards_.group(); }
  std::int64_t master_bytes() const override;
  std::int64_t gradient_bytes() const override;
  std::int64_t gathered_weight_bytes() const override;
  std::int64_t unit_gradient_bytes() const override;
  int shard_group_size() const override { return shards_.group(); }

  const FsdpShards& shards() const { return shards_; }
  const model::ParameterLayout& layout() const { return layout_; }
  kernels::Tensor master() const { return master_.tensor(); }
  kernels::Tensor grad_shard() const { return grads_.tensor(); }
  Communicator& group() { return *group_; }
  Communicator* replicas() { return replicas_.get(); }  // null without HSDP replicas
  // HSDP on a device backend: the next backward is the step's last, so each unit's range of the
  // gradient shard is summed across the replicas as soon as that backward has added it.
  void sum_replicas_in_next_backward();
  // Those sums, started by the last backward, done; returns how many there were (0: none were
  // started, the shard still has to be summed whole).
  int finish_replica_sums();
  int replica_index() const { return replica_; }
  // Whether the next unit's gather starts before this unit's compute (on the communication
  // thread, or on a device the communicator's stream).
  bool prefetching() const { return prefetch_; }
  // The backend's memory is not the host's: collectives run on the device's stream.
  bool on_device() const { return on_device_; }
  // Seconds the calling thread spent waiting for unit and replica collectives, and seconds spent
  // inside the shard-group and replica communicators' collectives on any thread.
  double seconds_waited() const { return waited_; }
  double seconds_in_collectives() const;
  void add_waited(double s) { waited_ += s; }

 private:
  struct Slot {
    kernels::Buffer buffer;
    bool large = false;  // embedding/head size, else block size
    int unit = -1;       // the unit it holds (or is receiving); -1: none
    bool in_use = false;
    CommThread::Ticket ready = 0;  // the task that fills (weights) or empties (gradients) it
    // Device backend: the collective that fills or empties it, and (gradients) whether its
    // owner's range is still to be added into the shard.
    Communicator::DeviceMark mark = 0;
    bool add_pending = false;
  };
  bool is_large(int unit) const { return unit == 0 || unit == head_; }
  Slot* find_free(std::vector<Slot>& slots, int unit);  // null when every buffer is in use
  Slot& free_slot(std::vector<Slot>& slots, int unit);
  void start_gather(int unit, Slot& slot);
  // Until the slot's collective is done: the host (thread tickets) or the device (marks) waits.
  void wait_for(Slot& slot);
  // Device backend: this rank's range of a reduced unit gradient into the gradient shard.
  void add_into_shard(Slot& slot);
  // Runs `task` on the communication thread (returns its ticket) or here (returns 0).
  CommThread::Ticket run(std::function<void()> task);
  void wait(CommThread::Ticket ticket);

  kernels::Backend& backend_;
  model::ParameterLayout layout_;
  int world_rank_ = 0, replica_ = 0;
  std::unique_ptr<Communicator> group_, replicas_;
  FsdpShards shards_;
  int head_ = 0;
  kernels::DType dtype_ = kernels::DType::f32;
  kernels::Buffer master_, grads_;  // fp32 shards
  std::vector<Slot> weight_slots_, grad_slots_;
  bool on_device_ = false;  // the backend's memory is not the host's
  bool prefetch_ = false, backward_follows_ = false;
  // HSDP replica sums: asked for the next backward, running in this pass, started so far.
  bool replicas_next_backward_ = false, replicas_this_pass_ = false;
  int replica_sums_ = 0;
  std::vector<float> host_masters_;  // weights()'s copy on a device backend
  std::unique_ptr<CommThread> thread_;
  double waited_ = 0.0;
};

// AdamW on this rank's shard of an FsdpParameters: gradients averaged over the world (HSDP: the
// replicas' shards all-reduced first), the global norm from the shard group's partial sums of
// squares, clipping and AdamW per piece (weight decay per parameter, as the replicated
// optimiser). The updated masters are gathered by the next forward, unit by unit.
class FsdpOptimizer final : public optim::Optimizer {
 public:
  FsdpOptimizer(kernels::Backend& backend, FsdpParameters& params, const optim::AdamWHyper& hyper,
                Communicator& world);

  std::string name() const override { return params_.replicas() ? "hsdp" : "fsdp"; }
  void last_backward_follows() override;
  void reduce_gradients() override;
  std::string describe_reduction() const override;
  double clip(double max_norm) override;
  void step(std::span<const double> lrs) override { adam_->step(lrs); }
  std::int64_t step_count() const override { return adam_->step_count(); }
  void set_step_count(std::int64_t step) override { adam_->set_step_count(step); }
  optim::OptimizerShard moments() override;
  void moments_loaded(std::int64_t adam_step) override;
  std::int64_t moment_bytes() const override {
    return 2 * static_cast<std::int64_t>(sizeof(float) * adam_->total_size());
  }
  std::int64_t full_moment_bytes() const override { return 2 * 4 * full_size_; }
  double seconds_waiting_for_collectives() const override { return params_.seconds_waited(); }
  double seconds_in_own_collectives() const override { return params_.seconds_in_collectives(); }

 private:
  kernels::Backend& backend_;
  FsdpParameters& params_;
  Communicator& world_;
  std::int64_t full_size_ = 0;      // parameter elements of the whole model
  int replica_sums_last_step_ = 0;  // unit ranges the last step summed across replicas
  std::vector<kernels::Tensor> piece_grads_;
  std::unique_ptr<optim::AdamW> adam_;
  HostMoments host_;
};

}  // namespace tandem::dist
