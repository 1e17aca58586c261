#include "tandem/dist/fsdp_shards.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::dist {

FsdpShards::FsdpShards(const model::ParameterLayout& layout, int group, int group_rank)
    : group_(group), group_rank_(group_rank), units_(model::parameter_units(layout)) {
  TANDEM_CHECK(group >= 1 && group_rank >= 0 && group_rank < group,
               "FSDP: rank {} of a shard group of {}", group_rank, group);
  const auto S = static_cast<std::size_t>(group);
  const auto g = static_cast<std::size_t>(group_rank);
  local_.push_back(0);
  for (const model::ParameterUnit& u : units_) {
    const auto n = static_cast<std::size_t>(u.size());
    std::vector<std::size_t> off;
    for (std::size_t r = 0; r <= S; ++r) off.push_back((n * r + S - 1) / S);  // ceil(n r / S)
    const auto begin = u.begin + static_cast<std::int64_t>(off[g]);
    const auto end = u.begin + static_cast<std::int64_t>(off[g + 1]);
    for (std::size_t i = 0; i < layout.entries().size(); ++i) {
      const model::ParameterEntry& e = layout.entries()[i];
      const std::int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel);
      if (lo < hi) pieces_.push_back({i, lo - e.offset, hi - lo, local_.back() + (lo - begin)});
    }
    local_.push_back(local_.back() + (end - begin));
    offsets_.push_back(std::move(off));
  }
}

std::int64_t FsdpShards::local_size(int unit) const {
  const auto u = static_cast<std::size_t>(unit);
  return local_[u + 1] - local_[u];
}

std::int64_t FsdpShards::largest_end_unit() const {
  return std::max(units_.front().size(), units_.back().size());
}

std::int64_t FsdpShards::largest_block() const {
  std::int64_t most = 0;
  for (std::size_t u = 1; u + 1 < units_.size(); ++u) most = std::max(most, units_[u].size());
  return most;
}

}  // namespace tandem::dist
