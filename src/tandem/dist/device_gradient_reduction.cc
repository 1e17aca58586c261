#include "tandem/dist/device_gradient_reduction.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "tandem/core/error.h"

namespace tandem::dist {

std::vector<GradientBucket> plan_gradient_buckets(std::span<const model::ParameterUnit> units,
                                                  std::int64_t bucket_elements) {
  TANDEM_CHECK(bucket_elements > 0, "gradient buckets need a positive size ({} elements)",
               bucket_elements);
  std::vector<GradientBucket> buckets;
  const int n = static_cast<int>(units.size());
  for (int u = n - 1; u >= 0;) {
    GradientBucket b;
    b.last_unit = u;
    b.end = units[static_cast<std::size_t>(u)].end;
    std::int64_t held = 0;
    while (u >= 0 && held < bucket_elements) held += units[static_cast<std::size_t>(u--)].size();
    b.first_unit = u + 1;
    b.begin = units[static_cast<std::size_t>(b.first_unit)].begin;
    buckets.push_back(b);
  }
  return buckets;
}

DeviceGradientReduction::DeviceGradientReduction(Communicator& comm, void* stream,
                                                 kernels::Tensor flat_grads,
                                                 std::span<const model::ParameterUnit> units,
                                                 std::int64_t bucket_bytes,
                                                 std::vector<std::size_t> owners)
    : comm_(comm), stream_(stream), flat_grads_(flat_grads), owners_(std::move(owners)) {
  TANDEM_CHECK(comm.reduces_device_memory(),
               "the {} communicator cannot reduce gradients in device memory", comm.name());
  TANDEM_CHECK(stream != nullptr, "gradient sums on the device need the backend's stream");
  TANDEM_CHECK(flat_grads.dtype() == kernels::DType::f32, "gradients are reduced in f32");
  buckets_ = plan_gradient_buckets(
      units, std::max<std::int64_t>(1, bucket_bytes / static_cast<std::int64_t>(sizeof(float))));
  bucket_of_unit_.assign(units.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (int u = buckets_[b].first_unit; u <= buckets_[b].last_unit; ++u)
      bucket_of_unit_[static_cast<std::size_t>(u)] = static_cast<int>(b);
  TANDEM_CHECK(buckets_.empty() || buckets_.front().end <= flat_grads.numel(),
               "gradient buckets reach element {}, past the gradient buffer's {}",
               buckets_.front().end, flat_grads.numel());
  TANDEM_CHECK(
      owners_.empty() || (owners_.size() == static_cast<std::size_t>(comm.world_size()) + 1 &&
                          std::is_sorted(owners_.begin(), owners_.end()) &&
                          owners_.back() <= static_cast<std::size_t>(flat_grads.numel())),
      "ZeRO-1's gradient ranges must be {} ascending offsets inside the buffer",
      comm.world_size() + 1);
  reset();
}

std::string DeviceGradientReduction::describe() const {
  std::int64_t largest = 0;
  for (const GradientBucket& b : buckets_) largest = std::max(largest, b.size());
  return fmt::format(
      "gradient reduction on the device ({}): {} bucket(s) of up to {:.2f} MiB, {} started by "
      "the backward as it completed them{}",
      comm_.name(), buckets_.size(),
      static_cast<double>(largest) * sizeof(float) / (1024.0 * 1024.0), overlapped_last_,
      owners_.empty() ? "" : "; each summed onto the ranks that own its elements (ZeRO-1)");
}

void DeviceGradientReduction::reset() {
  missing_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    missing_[b] = buckets_[b].last_unit - buckets_[b].first_unit + 1;
  reported_.assign(bucket_of_unit_.size(), false);
  next_ = 0;
  armed_ = false;
}

void DeviceGradientReduction::gradient_ready(int unit) {
  if (!armed_) return;  // an earlier micro-batch: its gradients are not complete
  TANDEM_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < bucket_of_unit_.size(),
               "gradient of unit {} reported; the model has {} units", unit,
               bucket_of_unit_.size());
  const auto u = static_cast<std::size_t>(unit);
  TANDEM_CHECK(!reported_[u], "the gradient of unit {} was reported twice in one backward", unit);
  reported_[u] = true;
  --missing_[static_cast<std::size_t>(bucket_of_unit_[u])];
  const std::size_t before = next_;
  start_ready_buckets();
  overlapped_ += static_cast<int>(next_ - before);
}

void DeviceGradientReduction::start_ready_buckets() {
  while (next_ < buckets_.size() && missing_[next_] == 0) start(next_++);
}

void DeviceGradientReduction::start(std::size_t bucket) {
  const GradientBucket& b = buckets_[bucket];
  if (owners_.empty())
    comm_.start_all_reduce_sum_device(flat_grads_.ptr<float>() + b.begin,
                                      static_cast<std::size_t>(b.size()), stream_);
  else
    comm_.start_reduce_scatter_sum_device(flat_grads_.ptr<float>(), owners_.data(),
                                          static_cast<std::size_t>(b.begin),
                                          static_cast<std::size_t>(b.end), stream_);
}

void DeviceGradientReduction::finish() {
  while (next_ < buckets_.size()) start(next_++);
  comm_.finish_device_collectives(stream_);
  reset();
  overlapped_last_ = overlapped_;
  overlapped_ = 0;
}

}  // namespace tandem::dist
