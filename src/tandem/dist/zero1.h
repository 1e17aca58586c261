// ZeRO-1 for data-parallel training: each rank keeps the Adam moments of one contiguous range of
// the flat parameter buffer only (1/W of them). Per step: gradients reduce-scattered (each rank
// gets the rank-ordered sum of its range, as the replicated all-reduce would give), the global
// norm from the ranks' partial sums of squares, clipping and AdamW on the range, then the updated
// parameters all-gathered. AdamW updates every element independently, so the result equals the
// replicated optimiser's up to the order of the norm's partial sums.
//
// On a GPU backend the sums run on the device, in buckets that the step's last backward starts as
// it completes them, each summed onto the ranks owning its elements
// (dist/device_gradient_reduction.h), so the reduce-scatter overlaps the backward as DDP's
// all-reduce does; the gather of the updated parameters follows the optimiser step.
//
// Checkpoints: each rank writes the moments of its range as its own shard (moments()), and reads
// its range at any W' from whichever shards hold it (train/optimizer_shards.h).
#pragma once

#include <memory>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/dist/device_gradient_reduction.h"
#include "tandem/dist/host_moments.h"
#include "tandem/kernels/backend.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/optimizer.h"

namespace tandem::dist {

class Zero1Optimizer final : public optim::Optimizer {
 public:
  // `full` describes every parameter (views into the flat buffers `params`/`grads`), in
  // registration order.
  Zero1Optimizer(kernels::Backend& backend, const std::vector<optim::ParamBuffer>& full,
                 kernels::Tensor params, kernels::Tensor grads, const optim::AdamWHyper& hyper,
                 Communicator& comm);
  ~Zero1Optimizer() override;

  // Reduces `model`'s gradients (the buffer `grads`) on the device in buckets of at least
  // `bucket_bytes`, each started as the backward completes it (a GPU backend and a communicator
  // that sums device memory).
  void reduce_on_device(model::Olmo3Model& model, std::int64_t bucket_bytes);

  std::string name() const override { return "zero1"; }
  void last_backward_follows() override;
  std::string describe_reduction() const override;
  // Sums the gradients over ranks into this rank's range and divides them by W.
  void reduce_gradients() override;
  // Global pre-clip L2 norm of the (reduced) gradients; clips this rank's range when
  // max_norm > 0.
  double clip(double max_norm) override;
  // AdamW on this rank's range, then every rank receives every updated parameter.
  void step(std::span<const double> lrs) override;
  std::int64_t step_count() const override { return shard_->step_count(); }
  void set_step_count(std::int64_t step) override { shard_->set_step_count(step); }
  optim::OptimizerShard moments() override;
  void moments_loaded(std::int64_t adam_step) override;
  std::int64_t moment_bytes() const override {
    return 2 * static_cast<std::int64_t>(sizeof(float) * shard_->total_size());
  }
  std::int64_t full_moment_bytes() const override {
    return 2 * static_cast<std::int64_t>(sizeof(float) * full_size_);
  }

 private:
  bool on_device() const { return !backend_.host_accessible(); }
  // One parameter's part inside this rank's range.
  struct Piece {
    std::size_t param_index;  // in `full_`
    std::size_t start;        // element offset inside that parameter
    std::size_t length;
  };

  kernels::Backend& backend_;
  std::vector<optim::ParamBuffer> full_;
  kernels::Tensor params_, grads_;
  std::size_t full_size_ = 0;  // total parameter elements
  Communicator& comm_;
  std::vector<std::size_t> offsets_;  // rank r owns [offsets_[r], offsets_[r + 1]) of the buffer
  std::vector<Piece> pieces_;
  std::vector<kernels::Tensor> shard_grads_;
  std::unique_ptr<optim::AdamW> shard_;
  HostMoments host_;
  std::unique_ptr<DeviceGradientReduction> device_;
  model::Olmo3Model* listened_ = nullptr;  // the model that reports to device_
};

}  // namespace tandem::dist
