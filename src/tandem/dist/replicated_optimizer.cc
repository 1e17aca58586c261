#include "tandem/dist/replicated_optimizer.h"

#include "tandem/dist/flat_split.h"
#include "tandem/optim/grad_clip.h"

namespace tandem::dist {

ReplicatedOptimizer::ReplicatedOptimizer(kernels::Backend& backend,
                                         std::vector<optim::ParamBuffer> params,
                                         kernels::Tensor flat_grads, const optim::AdamWHyper& hyper,
                                         Communicator& comm)
    : backend_(backend),
      params_(params),
      flat_grads_(flat_grads),
      comm_(comm),
      adam_(backend, std::move(params), hyper),
      host_(backend) {
  for (const auto& p : params_) grads_.push_back(p.grad);
}

ReplicatedOptimizer::~ReplicatedOptimizer() {
  if (listened_) listened_->set_gradient_listener(nullptr);
}

void ReplicatedOptimizer::reduce_on_device(model::Olmo3Model& model, std::int64_t bucket_bytes) {
  device_ = std::make_unique<DeviceGradientReduction>(comm_, backend_.device_stream(), flat_grads_,
                                                      model::parameter_units(model.layout()),
                                                      bucket_bytes);
  model.set_gradient_listener(device_.get());
  listened_ = &model;
}

void ReplicatedOptimizer::last_backward_follows() {
  if (device_) device_->arm();
}

void ReplicatedOptimizer::reduce_gradients() {
  if (comm_.world_size() == 1) return;
  if (device_) {
    device_->finish();
    backend_.scale(flat_grads_, 1.0f / static_cast<float>(comm_.world_size()));
    return;
  }
  comm_.all_reduce_sum(flat_grads_.ptr<float>(), static_cast<std::size_t>(flat_grads_.numel()));
  backend_.scale(flat_grads_, 1.0f / static_cast<float>(comm_.world_size()));
}

std::string ReplicatedOptimizer::describe_reduction() const {
  return device_ ? device_->describe() : std::string();
}

double ReplicatedOptimizer::clip(double max_norm) {
  return max_norm > 0 ? optim::clip_grad_norm(backend_, grads_, max_norm)
                      : optim::global_grad_norm(backend_, grads_);
}

void ReplicatedOptimizer::step(std::span<const double> lrs) { adam_.step(lrs); }

optim::OptimizerShard ReplicatedOptimizer::moments_in(std::int64_t begin, std::int64_t end) {
  // Every parameter's place in the flat buffer (its gradient is a view into the flat gradients,
  // which the parameters' buffer mirrors element for element), then its part of [begin, end).
  std::vector<std::pair<std::int64_t, std::int64_t>> placed;
  for (const optim::ParamBuffer& p : params_) placed.push_back(place_in(flat_grads_, p.grad));
  const std::vector<RunInRange> runs = runs_in_range(placed, begin, end);
  const auto all = adam_.moment_runs();
  std::vector<std::pair<kernels::Tensor, kernels::Tensor>> mine;
  for (const RunInRange& run : runs) {
    const kernels::Shape shape{run.length};
    mine.emplace_back(all[run.item].first.view(run.start, shape),
                      all[run.item].second.view(run.start, shape));
  }
  auto spans = host_.spans(mine);
  optim::OptimizerShard out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const optim::ParamBuffer& p = params_[runs[i].item];
    out.slices.push_back(
        {p.name, p.param.shape().dims(), runs[i].start, spans[i].first, spans[i].second});
  }
  out.adam_step = adam_.step_count();
  return out;
}

optim::OptimizerShard ReplicatedOptimizer::moments() {
  // Whole tensors: every rank holds (and on a resume reads) all of them.
  optim::OptimizerShard out = moments_in(0, flat_grads_.numel());
  out.shard = comm_.rank();
  out.num_shards = 1;
  return out;
}

optim::OptimizerShard ReplicatedOptimizer::moments_to_save() {
  const std::vector<std::int64_t> offsets = split_evenly(flat_grads_.numel(), comm_.world_size());
  const auto rank = static_cast<std::size_t>(comm_.rank());
  optim::OptimizerShard out = moments_in(offsets[rank], offsets[rank + 1]);
  out.shard = comm_.rank();
  out.num_shards = comm_.world_size();
  return out;
}

void ReplicatedOptimizer::moments_loaded(std::int64_t adam_step) {
  host_.upload(adam_.moment_runs());
  adam_.set_step_count(adam_step);
}

std::int64_t ReplicatedOptimizer::moment_bytes() const {
  return 2 * static_cast<std::int64_t>(sizeof(float) * adam_.total_size());
}

}  // namespace tandem::dist
