#include "tandem/dist/flat_split.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::dist {

std::vector<std::int64_t> split_evenly(std::int64_t total, int parts) {
  TANDEM_CHECK(total >= 0 && parts >= 1, "split_evenly: {} elements into {} parts", total, parts);
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(parts) + 1);
  // Unsigned 64-bit products as ZeRO-1 has always computed them (no overflow below 2^64 / W).
  for (int r = 0; r <= parts; ++r)
    offsets.push_back(static_cast<std::int64_t>(static_cast<std::uint64_t>(total) *
                                                static_cast<std::uint64_t>(r) /
                                                static_cast<std::uint64_t>(parts)));
  return offsets;
}

std::vector<RunInRange> runs_in_range(std::span<const std::pair<std::int64_t, std::int64_t>> items,
                                      std::int64_t begin, std::int64_t end) {
  std::vector<RunInRange> out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto [at, size] = items[i];
    const std::int64_t lo = std::max(at, begin), hi = std::min(at + size, end);
    if (lo < hi) out.push_back({i, lo - at, hi - lo});
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> place_in(const kernels::Tensor& buffer,
                                               const kernels::Tensor& view) {
  const auto* base = static_cast<const char*>(buffer.data());
  const auto* at = static_cast<const char*>(view.data());
  const std::size_t size = kernels::dtype_size(buffer.dtype());
  const std::int64_t offset = at >= base ? static_cast<std::int64_t>((at - base) / size) : -1;
  TANDEM_CHECK(
      view.dtype() == buffer.dtype() && offset >= 0 && offset + view.numel() <= buffer.numel(),
      "a view of {} elements lies outside its buffer of {}", view.numel(), buffer.numel());
  return {offset, view.numel()};
}

}  // namespace tandem::dist
