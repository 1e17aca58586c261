#include "tandem/data/batch_plan.h"

#include "tandem/core/error.h"
#include "tandem/data/numpy_random.h"

namespace tandem::data {

EpochPlan::EpochPlan(const DataConfig& config, std::uint64_t num_instances, std::uint64_t epoch)
    : epoch_(epoch),
      instances_per_batch_(static_cast<std::uint64_t>(config.instances_per_batch())) {
  TANDEM_CHECK(instances_per_batch_ > 0, "global_batch_size must hold at least one instance");
  order_ = global_instance_order(num_instances, static_cast<std::uint64_t>(config.seed), epoch,
                                 static_cast<std::uint64_t>(config.chunk_size()), config.shuffle);
  // The reference reshapes order[:total_size]; with chunking the order can be shorter than N.
  std::uint64_t usable = std::min<std::uint64_t>(order_.size(), num_instances);
  total_batches_ = usable / instances_per_batch_;
}

std::span<const std::uint32_t> EpochPlan::global_batch(std::uint64_t batch) const {
  TANDEM_CHECK(batch < total_batches_, "global batch {} out of range (epoch {} has {} batches)",
               batch, epoch_, total_batches_);
  return std::span<const std::uint32_t>(order_).subspan(batch * instances_per_batch_,
                                                        instances_per_batch_);
}

std::vector<std::uint64_t> EpochPlan::rank_share(std::uint64_t batch, std::uint64_t rank,
                                                 std::uint64_t world_size) const {
  auto row = global_batch(batch);
  std::vector<std::uint64_t> out;
  out.reserve(row.size() / world_size + 1);
  for (std::uint64_t i = rank; i < row.size(); i += world_size) out.push_back(row[i]);
  return out;
}

void check_rank(const DataConfig& config, std::uint64_t rank, std::uint64_t world_size) {
  TANDEM_CHECK(world_size >= 1, "world size must be at least 1");
  TANDEM_CHECK(rank < world_size, "rank {} is not below world size {}", rank, world_size);
  auto ipb = static_cast<std::uint64_t>(config.instances_per_batch());
  TANDEM_CHECK(ipb % world_size == 0,
               "world size {} does not divide the {} instances of a global batch "
               "(global_batch_size {} tokens / sequence_length {})",
               world_size, ipb, config.global_batch_size, config.sequence_length);
}

}  // namespace tandem::data
