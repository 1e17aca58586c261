// Data parallelism with a replicated optimiser (DDP): every rank holds every parameter, gradient
// and Adam moment. Gradients are all-reduced (summed in rank order) and divided by the world size;
// the norm, clipping and AdamW then run identically on every rank. One process is the W = 1 case.
// On a GPU backend the sums run on the device, in buckets overlapped with the step's last
// backward (dist/device_gradient_reduction.h); on the CPU one all-reduce follows the backward.
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

class ReplicatedOptimizer final : public optim::Optimizer {
 public:
  // `params` describe every parameter (views into the flat buffers `flat_grads` belongs to).
  ReplicatedOptimizer(kernels::Backend& backend, std::vector<optim::ParamBuffer> params,
                      kernels::Tensor flat_grads, const optim::AdamWHyper& hyper,
                      Communicator& comm);

  ~ReplicatedOptimizer() override;

  // Reduces `model`'s gradients on the device (its backend's memory, this communicator's device
  // sums) in buckets of at least `bucket_bytes`, each started as the backward completes it.
  void reduce_on_device(model::Olmo3Model& model, std::int64_t bucket_bytes);

  std::string name() const override { return "replicated"; }
  void last_backward_follows() override;
  void reduce_gradients() override;
  // On a GPU backend: "gradient reduction on the device (nccl): N bucket(s) of up to X MiB, K
  // started by the backward as it completed them".
  std::string describe_reduction() const override;
  double clip(double max_norm) override;
  void step(std::span<const double> lrs) override;
  std::int64_t step_count() const override { return adam_.step_count(); }
  void set_step_count(std::int64_t step) override { adam_.set_step_count(step); }
  optim::OptimizerShard moments() override;
  // Rank r's share of the flat buffer as shard r of W (whole tensors at W = 1); on a GPU only
  // that share is copied to the host.
  optim::OptimizerShard moments_to_save() override;
  void moments_loaded(std::int64_t adam_step) override;
  std::int64_t moment_bytes() const override;
  std::int64_t full_moment_bytes() const override { return moment_bytes(); }

 private:
  // The moments of the parameter elements in [begin, end) of the flat buffer, as host spans.
  optim::OptimizerShard moments_in(std::int64_t begin, std::int64_t end);

  kernels::Backend& backend_;
  std::vector<optim::ParamBuffer> params_;
  std::vector<kernels::Tensor> grads_;
  kernels::Tensor flat_grads_;
  Communicator& comm_;
  optim::AdamW adam_;
  HostMoments host_;
  std::unique_ptr<DeviceGradientReduction> device_;
  model::Olmo3Model* listened_ = nullptr;  // the model that reports to device_
};

}  // namespace tandem::dist
