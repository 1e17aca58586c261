// How data parallelism divides a flat parameter buffer of N elements among W ranks: rank r takes
// elements [N*r/W, N*(r+1)/W). ZeRO-1's optimizer ranges follow it, and so do the checkpoint
// shards of replicated state (the weights under ddp and zero1, the moments under ddp): a
// checkpoint written at W ranks is cut the same way whichever of these strategies wrote it, and
// no rank writes more than its share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tandem/kernels/tensor.h"

namespace tandem::dist {

// The W + 1 boundaries: rank r's range is [offsets[r], offsets[r + 1]).
std::vector<std::int64_t> split_evenly(std::int64_t total, int parts);

// One item's part inside a range: elements [start, start + length) of item `item`.
struct RunInRange {
  std::size_t item = 0;
  std::int64_t start = 0;
  std::int64_t length = 0;
};
// The parts of `items` ((offset, size) in the flat buffer) that lie inside
// [begin, end), in item order; items outside it have none.
std::vector<RunInRange> runs_in_range(std::span<const std::pair<std::int64_t, std::int64_t>> items,
                                      std::int64_t begin, std::int64_t end);

// Where `view` (a view into `buffer`, of the same dtype) lies in it: (element offset, elements).
// Throws when it does not lie inside.
std::pair<std::int64_t, std::int64_t> place_in(const kernels::Tensor& buffer,
                                               const kernels::Tensor& view);

}  // namespace tandem::dist
