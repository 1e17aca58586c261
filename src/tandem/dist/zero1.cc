#include "tandem/dist/zero1.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem {

Zero1Optimizer::Zero1Optimizer(const std::vector<optim::ParamBuffer>& full, float* params,
                               float* grads, std::size_t buffer_size,
                               const optim::AdamWHyper& hyper, Communicator& comm)
    : full_(full),
      params_(params),
      grads_(grads),
      buffer_size_(buffer_size),
      hyper_(hyper),
      comm_(comm) {
  const auto world = static_cast<std::size_t>(comm_.world_size());
  const auto rank = static_cast<std::size_t>(comm_.rank());
  for (std::size_t r = 0; r <= world; ++r) offsets_.push_back(buffer_size_ * r / world);
  const std::size_t begin = offsets_[rank], end = offsets_[rank + 1];
  std::vector<optim::ParamBuffer> shard;
  for (std::size_t i = 0; i < full_.size(); ++i) {
    const optim::ParamBuffer& p = full_[i];
    full_size_ += p.size;
    const auto at = static_cast<std::size_t>(p.param - params_);
    TANDEM_CHECK(at + p.size <= buffer_size_, "ZeRO-1: parameter {} lies outside the buffer",
                 p.name);
    const std::size_t lo = std::max(at, begin), hi = std::min(at + p.size, end);
    if (lo >= hi) continue;
    pieces_.push_back({i, lo - at, hi - lo});
    shard.push_back({p.name, params_ + lo, grads_ + lo, hi - lo, p.weight_decay});
    shard_grads_.push_back({grads_ + lo, hi - lo});
  }
  shard_ = std::make_unique<optim::AdamW>(std::move(shard), hyper_);
}

void Zero1Optimizer::reduce_gradients() {
  comm_.reduce_scatter_sum(grads_, offsets_.data());
  const float inv = 1.0f / static_cast<float>(comm_.world_size());
  const auto rank = static_cast<std::size_t>(comm_.rank());
  for (std::size_t i = offsets_[rank]; i < offsets_[rank + 1]; ++i) grads_[i] *= inv;
}

double Zero1Optimizer::clip(double max_norm) {
  double sum = 0.0;
  for (const auto& g : shard_grads_) sum += optim::sum_of_squares(g.data, g.size);
  comm_.all_reduce_sum(&sum, 1);
  const double norm = std::sqrt(sum);
  if (max_norm > 0) optim::scale_grads(shard_grads_, norm, max_norm);
  return norm;
}

void Zero1Optimizer::step(double lr) {
  shard_->step(lr);
  comm_.all_gather(params_, offsets_.data());
}

std::unique_ptr<optim::AdamW> Zero1Optimizer::gather_full() {
  // Each rank writes its moments at their buffer positions, then all ranges are gathered.
  std::vector<float> avg(buffer_size_, 0.0f), avg_sq(buffer_size_, 0.0f);
  std::size_t flat = 0;
  for (const Piece& piece : pieces_) {
    const auto at = static_cast<std::size_t>(full_[piece.param_index].param - params_);
    std::copy_n(shard_->exp_avg().data() + flat, piece.length, avg.data() + at + piece.start);
    std::copy_n(shard_->exp_avg_sq().data() + flat, piece.length, avg_sq.data() + at + piece.start);
    flat += piece.length;
  }
  comm_.all_gather(avg.data(), offsets_.data());
  comm_.all_gather(avg_sq.data(), offsets_.data());
  auto out = std::make_unique<optim::AdamW>(full_, hyper_);
  for (std::size_t i = 0; i < full_.size(); ++i) {
    const auto at = static_cast<std::size_t>(full_[i].param - params_);
    std::copy_n(avg.data() + at, full_[i].size, out->exp_avg(i).data());
    std::copy_n(avg_sq.data() + at, full_[i].size, out->exp_avg_sq(i).data());
  }
  out->set_step_count(shard_->step_count());
  return out;
}

void Zero1Optimizer::load_from_full(optim::AdamW& full) {
  TANDEM_CHECK(full.num_params() == full_.size(),
               "ZeRO-1: the checkpoint's optimiser has {} "
               "parameters, the model {}",
               full.num_params(), full_.size());
  std::size_t flat = 0;
  for (const Piece& piece : pieces_) {
    std::copy_n(full.exp_avg(piece.param_index).data() + piece.start, piece.length,
                shard_->exp_avg().data() + flat);
    std::copy_n(full.exp_avg_sq(piece.param_index).data() + piece.start, piece.length,
                shard_->exp_avg_sq().data() + flat);
    flat += piece.length;
  }
  shard_->set_step_count(full.step_count());
}

}  // namespace tandem
