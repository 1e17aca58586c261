#include "tandem/dist/fsdp.h"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/optim/grad_clip.h"

namespace tandem::dist {

using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

FsdpParameters::FsdpParameters(const model::ModelConfig& config, kernels::Backend& backend,
                               Communicator& world, const DistConfig& dist)
    : backend_(backend),
      layout_(config),
      world_rank_(world.rank()),
      shards_(layout_, dist::shard_group_size(dist, world.world_size()),
              world.rank() % dist::shard_group_size(dist, world.world_size())),
      head_(static_cast<int>(config.n_layers) + 1) {
  on_device_ = !backend_.host_accessible();
  const int S = shards_.group();
  TANDEM_CHECK(!on_device_ || world.world_size() == 1 || world.reduces_device_memory(),
               "dist.strategy {}: backend '{}' keeps its memory on the device, and the {} "
               "communicator gathers and reduces host memory (run with TANDEM_COMMUNICATOR=nccl)",
               strategy_name(dist.strategy), backend_.name(), world.name());
  replica_ = world.rank() / S;
  // Consecutive ranks form a shard group; equal positions across groups are replicas.
  group_ = world.split(replica_, world.rank());
  if (world.world_size() > S) replicas_ = world.split(shards_.group_rank(), world.rank());
  TANDEM_CHECK(group_->world_size() == S, "FSDP: the shard group has {} ranks, expected {}",
               group_->world_size(), S);
  master_ = backend_.allocate(DType::f32, Shape{shards_.shard_size()});
  grads_ = backend_.allocate(DType::f32, Shape{shards_.shard_size()});
  backend_.zero(master_);
  backend_.zero(grads_);
  // On a device the collectives are asynchronous already: prefetch needs no thread.
  prefetch_ = dist.prefetch && S > 1 && (on_device_ || group_->allows_communication_thread());
  if (prefetch_ && !on_device_) thread_ = std::make_unique<CommThread>();
  const int block_slots = fsdp_block_buffers(prefetch_);
  auto make_slots = [&](std::vector<Slot>& slots, DType dtype) {
    slots.clear();
    slots.push_back({backend_.allocate(dtype, Shape{shards_.largest_end_unit()}), true});
    if (shards_.largest_block() > 0)
      for (int i = 0; i < block_slots; ++i)
        slots.push_back({backend_.allocate(dtype, Shape{shards_.largest_block()}), false});
  };
  make_slots(grad_slots_, DType::f32);
  make_slots(weight_slots_, dtype_);
}

FsdpParameters::~FsdpParameters() {
  // Tasks still queued (an error unwound a pass) must not outlive the buffers they use.
  thread_.reset();
}

void FsdpParameters::set_compute_dtype(DType dtype) {
  if (dtype == dtype_) return;
  end_pass();
  dtype_ = dtype;
  for (Slot& s : weight_slots_)
    s = Slot{backend_.allocate(dtype, s.buffer.tensor().shape()), s.large};
}

double FsdpParameters::seconds_in_collectives() const {
  return group_->seconds_in_collectives() + (replicas_ ? replicas_->seconds_in_collectives() : 0.0);
}

CommThread::Ticket FsdpParameters::run(std::function<void()> task) {
  if (thread_) return thread_->submit(std::move(task));
  // Here: the time inside the collectives is what the step waits (not the shard's additions).
  const double before = group_->seconds_in_collectives();
  task();
  waited_ += group_->seconds_in_collectives() - before;
  return 0;
}

void FsdpParameters::wait(CommThread::Ticket ticket) {
  if (thread_ && ticket != 0) waited_ += thread_->wait(ticket);
}

void FsdpParameters::wait_for(Slot& slot) {
  wait(slot.ready);
  slot.ready = 0;
  if (slot.mark != 0) group_->order_after_device_collectives(slot.mark, backend_.device_stream());
  slot.mark = 0;
}

void FsdpParameters::add_into_shard(Slot& slot) {
  const std::vector<std::size_t>& off = shards_.offsets(slot.unit);
  const auto g = static_cast<std::size_t>(shards_.group_rank());
  const auto n = static_cast<std::int64_t>(off[g + 1] - off[g]);
  slot.add_pending = false;
  if (n == 0) return;
  const Tensor shard = grads_.tensor().view(shards_.local_begin(slot.unit), Shape{n});
  // The same float additions as the host path's loop.
  backend_.add(shard, slot.buffer.tensor().view(static_cast<std::int64_t>(off[g]), Shape{n}),
               shard);
  // The step's last backward: this range is final, the replicas sum it behind the add. They hold
  // the same shard, so they start the same sums in the same order.
  if (replicas_this_pass_) {
    replicas_->start_all_reduce_sum_device(shard.ptr<float>(), static_cast<std::size_t>(n),
                                           backend_.device_stream());
    ++replica_sums_;
  }
}

void FsdpParameters::sum_replicas_in_next_backward() {
  replicas_next_backward_ = on_device_ && replicas_ != nullptr;
}

int FsdpParameters::finish_replica_sums() {
  const int started = replica_sums_;
  replica_sums_ = 0;
  if (started == 0) return 0;
  const double before = replicas_->seconds_in_collectives();
  replicas_->finish_device_collectives(backend_.device_stream());
  waited_ += replicas_->seconds_in_collectives() - before;
  return started;
}

FsdpParameters::Slot* FsdpParameters::find_free(std::vector<Slot>& slots, int unit) {
  // The first buffer holding nothing, else the first one not in use (its unit was released; the
  // pass order makes the choice the same on every rank).
  Slot* best = nullptr;
  for (Slot& s : slots) {
    if (s.large != is_large(unit) || s.in_use) continue;
    if (!best || (best->unit != -1 && s.unit == -1)) best = &s;
  }
  return best;
}

FsdpParameters::Slot& FsdpParameters::free_slot(std::vector<Slot>& slots, int unit) {
  Slot* slot = find_free(slots, unit);
  TANDEM_CHECK(slot != nullptr, "FSDP: no free pool buffer for unit {} (a unit was not released)",
               unit);
  return *slot;
}

void FsdpParameters::start_gather(int unit, Slot& slot) {
  wait_for(slot);  // a gather still filling it (a prefetch that was not used)
  slot.unit = unit;
  const std::vector<std::size_t>& off = shards_.offsets(unit);
  const auto g = static_cast<std::size_t>(shards_.group_rank());
  const Shape mine{shards_.local_size(unit)};
  const Tensor dst = slot.buffer.tensor().view(static_cast<std::int64_t>(off[g]), mine);
  const Tensor src = master_.tensor().view(shards_.local_begin(unit), mine);
  if (mine[0] > 0) {
    if (dtype_ == DType::f32)
      backend_.copy(dst, src);
    else
      backend_.cast(dst, src);  // elementwise: the same bits as casting the whole masters
  }
  if (shards_.group() == 1) return;
  void* data = slot.buffer.tensor().data();
  const std::size_t element_bytes = kernels::dtype_size(dtype_);
  Communicator* group = group_.get();
  if (on_device_) {
    // Behind the cast above on the backend's stream; the unit's compute waits for the mark.
    group->start_all_gather_device(data, off.data(), element_bytes, backend_.device_stream());
    slot.mark = group->mark_device_collectives();
    return;
  }
  slot.ready = run([group, data, &off, element_bytes] {
    if (element_bytes == 4)
      group->all_gather(static_cast<float*>(data), off.data());
    else
      group->all_gather_bytes(data, off.data(), element_bytes);
  });
}

void FsdpParameters::begin_pass(bool backward_follows) {
  backward_follows_ = backward_follows;
  replicas_this_pass_ = backward_follows && replicas_next_backward_;
  if (backward_follows) replicas_next_backward_ = false;
}

Tensor FsdpParameters::acquire(int unit, bool backward) {
  Slot* slot = nullptr;
  for (Slot& s : weight_slots_)
    if (s.unit == unit && !s.in_use) slot = &s;
  if (!slot) {
    slot = &free_slot(weight_slots_, unit);
    start_gather(unit, *slot);
  }
  slot->in_use = true;
  // The next unit's gather runs while this one computes.
  int next = -1;
  if (!backward)
    next = unit < head_ ? unit + 1 : (backward_follows_ && head_ > 1 ? head_ - 1 : -1);
  else
    next = unit > 1 ? unit - 1 : -1;
  if (prefetch_ && next >= 0) {
    bool held = false;
    for (const Slot& s : weight_slots_) held = held || s.unit == next;
    if (Slot* target = held ? nullptr : find_free(weight_slots_, next)) start_gather(next, *target);
  }
  wait_for(*slot);
  return slot->buffer.tensor().view(0,
                                    Shape{shards_.units()[static_cast<std::size_t>(unit)].size()});
}

void FsdpParameters::release(int unit) {
  for (Slot& s : weight_slots_)
    if (s.unit == unit && s.in_use) {
      s.in_use = false;
      return;
    }
  core::fail("FSDP: unit {} released but not acquired", unit);
}

Tensor FsdpParameters::gradient(int unit) {
  Slot& slot = free_slot(grad_slots_, unit);
  wait_for(slot);  // its previous unit's reduce-scatter
  if (slot.add_pending) add_into_shard(slot);
  slot.unit = unit;
  slot.in_use = true;
  const Tensor t =
      slot.buffer.tensor().view(0, Shape{shards_.units()[static_cast<std::size_t>(unit)].size()});
  backend_.zero(t);
  return t;
}

void FsdpParameters::gradient_done(int unit) {
  Slot* slot = nullptr;
  for (Slot& s : grad_slots_)
    if (s.unit == unit && s.in_use) slot = &s;
  TANDEM_CHECK(slot != nullptr, "FSDP: gradient of unit {} handed back but not taken", unit);
  const std::vector<std::size_t>& off = shards_.offsets(unit);
  if (on_device_) {
    slot->in_use = false;
    slot->add_pending = true;  // added when the buffer is next taken, or at the pass's end
    if (shards_.group() == 1) return;
    const std::size_t S = static_cast<std::size_t>(shards_.group());
    group_->start_reduce_scatter_sum_device(slot->buffer.tensor().ptr<float>(), off.data(), off[0],
                                            off[S], backend_.device_stream());
    slot->mark = group_->mark_device_collectives();
    return;
  }
  const auto g = static_cast<std::size_t>(shards_.group_rank());
  auto* data = slot->buffer.tensor().ptr<float>();
  float* shard = grads_.tensor().ptr<float>() + shards_.local_begin(unit);
  const std::size_t n = off[g + 1] - off[g];
  Communicator* group = group_.get();
  slot->in_use = false;
  slot->ready = run([group, data, &off, g, shard, n] {
    group->reduce_scatter_sum(data, off.data());
    // Accumulated over micro-batches in the shard (plain float adds, as the backend's add).
    const float* mine = data + off[g];
    for (std::size_t i = 0; i < n; ++i) shard[i] += mine[i];
  });
}

void FsdpParameters::end_pass() {
  if (thread_) waited_ += thread_->drain();
  if (on_device_) {
    if (shards_.group() > 1) {
      const double before = group_->seconds_in_collectives();
      group_->finish_device_collectives(backend_.device_stream());
      waited_ += group_->seconds_in_collectives() - before;
    }
    for (Slot& s : grad_slots_)
      if (s.add_pending) add_into_shard(s);
  }
  replicas_this_pass_ = false;
  // The masters may change before the next pass: nothing gathered is kept.
  for (std::vector<Slot>* slots : {&weight_slots_, &grad_slots_})
    for (Slot& s : *slots) s.unit = -1, s.in_use = false, s.ready = 0, s.mark = 0;
}

void FsdpParameters::zero_grads() { backend_.zero(grads_); }

model::WeightShard FsdpParameters::weights() {
  model::WeightShard out;
  float* base = nullptr;
  if (on_device_) {
    host_masters_.resize(static_cast<std::size_t>(master_.tensor().numel()));
    backend_.download(host_masters_.data(), master_.tensor());
    base = host_masters_.data();
  } else {
    base = master_.tensor().ptr<float>();
  }
  for (const FsdpShards::Piece& p : shards_.pieces()) {
    const model::ParameterEntry& e = layout_.entries()[p.param_index];
    out.slices.push_back({e.name, e.shape, p.start,
                          std::span<float>(base + p.local, static_cast<std::size_t>(p.length))});
  }
  out.num_shards = checkpoint_shards();
  out.shard = checkpoint_shard();
  return out;
}

void FsdpParameters::weights_written() {
  if (!on_device_) return;
  TANDEM_CHECK(host_masters_.size() == static_cast<std::size_t>(master_.tensor().numel()),
               "FSDP: weights_written without weights()");
  backend_.upload(master_.tensor(), host_masters_.data());
}

int FsdpParameters::checkpoint_shard() const {
  // HSDP: the first group's ranks write the shards; the replicas hold the same values.
  return replica_ == 0 ? shards_.group_rank() : shards_.group() + world_rank_;
}

std::int64_t FsdpParameters::master_bytes() const {
  return static_cast<std::int64_t>(master_.bytes());
}
std::int64_t FsdpParameters::gradient_bytes() const {
  return static_cast<std::int64_t>(grads_.bytes());
}
std::int64_t FsdpParameters::gathered_weight_bytes() const {
  std::int64_t n = 0;
  for (const Slot& s : weight_slots_) n += static_cast<std::int64_t>(s.buffer.bytes());
  return n;
}
std::int64_t FsdpParameters::unit_gradient_bytes() const {
  std::int64_t n = 0;
  for (const Slot& s : grad_slots_) n += static_cast<std::int64_t>(s.buffer.bytes());
  return n;
}

FsdpOptimizer::FsdpOptimizer(kernels::Backend& backend, FsdpParameters& params,
                             const optim::AdamWHyper& hyper, Communicator& world)
    : backend_(backend), params_(params), world_(world), host_(backend) {
  std::vector<optim::ParamBuffer> pieces;
  for (const model::ParameterEntry& e : params_.layout().entries()) full_size_ += e.numel;
  for (const FsdpShards::Piece& p : params_.shards().pieces()) {
    const model::ParameterEntry& e = params_.layout().entries()[p.param_index];
    const Shape run{p.length};
    pieces.push_back({e.name, params_.master().view(p.local, run),
                      params_.grad_shard().view(p.local, run), e.weight_decay});
    piece_grads_.push_back(params_.grad_shard().view(p.local, run));
  }
  adam_ = std::make_unique<optim::AdamW>(backend_, std::move(pieces), hyper);
}

void FsdpOptimizer::last_backward_follows() { params_.sum_replicas_in_next_backward(); }

void FsdpOptimizer::reduce_gradients() {
  const Tensor g = params_.grad_shard();
  if (Communicator* replicas = params_.replicas()) {
    replica_sums_last_step_ = params_.finish_replica_sums();
    if (replica_sums_last_step_ == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto n = static_cast<std::size_t>(g.numel());
      if (!params_.on_device()) {
        replicas->all_reduce_sum(g.ptr<float>(), n);
      } else {
        replicas->start_all_reduce_sum_device(g.ptr<float>(), n, backend_.device_stream());
        replicas->finish_device_collectives(backend_.device_stream());
      }
      params_.add_waited(seconds_since(t0));
    }
  }
  // The mean over every rank's micro-batches, as the replicated optimiser's.
  backend_.scale(g, 1.0f / static_cast<float>(world_.world_size()));
}

std::string FsdpOptimizer::describe_reduction() const {
  Communicator* replicas = params_.replicas();
  if (!replicas || !params_.on_device()) return {};
  return fmt::format(
      "replica sums on the device ({}): the gradient shard summed across {} replicas in {} "
      "unit range(s), each started as the step's last backward added it",
      replicas->name(), replicas->world_size(), replica_sums_last_step_);
}

double FsdpOptimizer::clip(double max_norm) {
  double sum = optim::sum_of_squares(backend_, piece_grads_);
  const auto t0 = std::chrono::steady_clock::now();
  params_.group().all_reduce_sum(&sum, 1);  // the replicas hold the same shards
  params_.add_waited(seconds_since(t0));
  const double norm = std::sqrt(sum);
  if (max_norm > 0) optim::scale_grads(backend_, piece_grads_, norm, max_norm);
  return norm;
}

optim::OptimizerShard FsdpOptimizer::moments() {
  optim::OptimizerShard out;
  auto spans = host_.spans(adam_->moment_runs());
  const auto& pieces = params_.shards().pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const model::ParameterEntry& e = params_.layout().entries()[pieces[i].param_index];
    out.slices.push_back({e.name, e.shape, pieces[i].start, spans[i].first, spans[i].second});
  }
  out.adam_step = adam_->step_count();
  out.shard = params_.checkpoint_shard();
  out.num_shards = params_.checkpoint_shards();
  return out;
}

void FsdpOptimizer::moments_loaded(std::int64_t adam_step) {
  host_.upload(adam_->moment_runs());
  adam_->set_step_count(adam_step);
}

}  // namespace tandem::dist
