// The global batch order of one epoch, as OLMo-core's NumpyFSLDataLoader builds it: the shuffled
// global instance order, cut after instances_per_batch * (N // instances_per_batch) instances
// (tail dropped), row b = global batch b; DP rank r of W takes entries r, r+W, ... of a row.
// Nothing here depends on the world size except rank_share(), so every world size sees the same
// global batches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/data/data_config.h"

namespace tandem::data {

class EpochPlan {
 public:
  EpochPlan(const DataConfig& config, std::uint64_t num_instances, std::uint64_t epoch);

  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t instances_per_batch() const { return instances_per_batch_; }
  std::uint64_t total_batches() const { return total_batches_; }
  std::span<const std::uint32_t> global_order() const { return order_; }  // the whole permutation
  std::span<const std::uint32_t> global_batch(std::uint64_t batch) const;
  // Instances of `batch` for DP rank `rank` of `world_size`, in the order the rank gets them.
  std::vector<std::uint64_t> rank_share(std::uint64_t batch, std::uint64_t rank,
                                        std::uint64_t world_size) const;

 private:
  std::uint64_t epoch_;
  std::uint64_t instances_per_batch_;
  std::uint64_t total_batches_;
  std::vector<std::uint32_t> order_;
};

// Checks that `world_size` can split a global batch evenly (OLMo-core requires the rank batch in
// tokens to be a multiple of sequence_length) and that rank is in range.
void check_rank(const DataConfig& config, std::uint64_t rank, std::uint64_t world_size);

}  // namespace tandem::data
