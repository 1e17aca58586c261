#include "tandem/dist/zero1.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/dist/flat_split.h"
#include "tandem/optim/grad_clip.h"

namespace tandem::dist {

Zero1Optimizer::Zero1Optimizer(kernels::Backend& backend,
                               const std::vector<optim::ParamBuffer>& full, kernels::Tensor params,
                               kernels::Tensor grads, const optim::AdamWHyper& hyper,
                               Communicator& comm)
    : backend_(backend), full_(full), params_(params), grads_(grads), comm_(comm), host_(backend) {
  const auto buffer_size = params_.numel();
  for (std::int64_t o : split_evenly(buffer_size, comm_.world_size()))
    offsets_.push_back(static_cast<std::size_t>(o));
  const auto rank = static_cast<std::size_t>(comm_.rank());
  // Each parameter's place in the buffer (a view into it), then its part of this rank's range.
  std::vector<std::pair<std::int64_t, std::int64_t>> placed;
  for (const optim::ParamBuffer& p : full_) {
    full_size_ += p.size();
    placed.push_back(place_in(params_, p.param));
  }
  std::vector<optim::ParamBuffer> shard;
  for (const RunInRange& run : runs_in_range(placed, static_cast<std::int64_t>(offsets_[rank]),
                                             static_cast<std::int64_t>(offsets_[rank + 1]))) {
    const optim::ParamBuffer& p = full_[run.item];
    pieces_.push_back(
        {run.item, static_cast<std::size_t>(run.start), static_cast<std::size_t>(run.length)});
    const kernels::Shape shape{run.length};
    const std::int64_t first = placed[run.item].first + run.start;
    shard.push_back(
        {p.name, params_.view(first, shape), grads_.view(first, shape), p.weight_decay});
    shard_grads_.push_back(grads_.view(first, shape));
  }
  shard_ = std::make_unique<optim::AdamW>(backend_, std::move(shard), hyper);
}

Zero1Optimizer::~Zero1Optimizer() {
  if (listened_) listened_->set_gradient_listener(nullptr);
}

void Zero1Optimizer::reduce_on_device(model::Olmo3Model& model, std::int64_t bucket_bytes) {
  TANDEM_CHECK(on_device(), "ZeRO-1: bucketed device sums need a GPU backend, not '{}'",
               backend_.name());
  device_ = std::make_unique<DeviceGradientReduction>(comm_, backend_.device_stream(), grads_,
                                                      model::parameter_units(model.layout()),
                                                      bucket_bytes, offsets_);
  model.set_gradient_listener(device_.get());
  listened_ = &model;
}

void Zero1Optimizer::last_backward_follows() {
  if (device_) device_->arm();
}

std::string Zero1Optimizer::describe_reduction() const {
  return device_ ? device_->describe() : std::string();
}

void Zero1Optimizer::reduce_gradients() {
  // A GPU backend's gradients are summed where they are, in the buckets the backward started.
  TANDEM_CHECK(device_ || !on_device(),
               "ZeRO-1 on backend '{}': its gradients are summed on the device, in buckets "
               "(reduce_on_device), not through host memory",
               backend_.name());
  if (device_)
    device_->finish();
  else
    comm_.reduce_scatter_sum(grads_.ptr<float>(), offsets_.data());
  const auto rank = static_cast<std::size_t>(comm_.rank());
  const kernels::Shape mine{static_cast<std::int64_t>(offsets_[rank + 1] - offsets_[rank])};
  backend_.scale(grads_.view(static_cast<std::int64_t>(offsets_[rank]), mine),
                 1.0f / static_cast<float>(comm_.world_size()));
}

double Zero1Optimizer::clip(double max_norm) {
  double sum = optim::sum_of_squares(backend_, shard_grads_);
  comm_.all_reduce_sum(&sum, 1);
  const double norm = std::sqrt(sum);
  if (max_norm > 0) optim::scale_grads(backend_, shard_grads_, norm, max_norm);
  return norm;
}

void Zero1Optimizer::step(std::span<const double> lrs) {
  shard_->step(lrs);
  if (on_device())
    comm_.all_gather_device(params_.ptr<float>(), offsets_.data(), backend_.device_stream());
  else
    comm_.all_gather(params_.ptr<float>(), offsets_.data());
}

optim::OptimizerShard Zero1Optimizer::moments() {
  optim::OptimizerShard out;
  auto spans = host_.spans(shard_->moment_runs());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const optim::ParamBuffer& p = full_[pieces_[i].param_index];
    out.slices.push_back({p.name, p.param.shape().dims(),
                          static_cast<std::int64_t>(pieces_[i].start), spans[i].first,
                          spans[i].second});
  }
  out.adam_step = shard_->step_count();
  out.shard = comm_.rank();
  out.num_shards = comm_.world_size();
  return out;
}

void Zero1Optimizer::moments_loaded(std::int64_t adam_step) {
  host_.upload(shard_->moment_runs());
  shard_->set_step_count(adam_step);
}

}  // namespace tandem::dist
