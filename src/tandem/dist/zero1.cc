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

std::vector<Zero1Optimizer::MomentRange> Zero1Optimizer::moment_ranges() {
  std::vector<MomentRange> out;
  std::size_t flat = 0;
  for (const Piece& piece : pieces_) {
    out.push_back({piece.param_index, piece.start, shard_->exp_avg().subspan(flat, piece.length),
                   shard_->exp_avg_sq().subspan(flat, piece.length)});
    flat += piece.length;
  }
  return out;
}

}  // namespace tandem
