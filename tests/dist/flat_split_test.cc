// The even split of a flat buffer among ranks (dist/flat_split.h), which ZeRO-1's ranges and the
// checkpoint shards of replicated state share.
#include "tandem/dist/flat_split.h"

#include <gtest/gtest.h>

#include "tandem/core/error.h"

namespace tandem::dist {
namespace {

TEST(FlatSplit, RangesTileTheBufferAndDifferByAtMostOne) {
  for (std::int64_t total : {0, 1, 7, 73184, 1000003})
    for (int parts : {1, 2, 3, 4, 8, 13}) {
      const std::vector<std::int64_t> o = split_evenly(total, parts);
      ASSERT_EQ(o.size(), static_cast<std::size_t>(parts) + 1);
      EXPECT_EQ(o.front(), 0);
      EXPECT_EQ(o.back(), total);
      for (int r = 0; r < parts; ++r) {
        const std::int64_t size = o[r + 1] - o[r];
        EXPECT_GE(size, total / parts) << total << " / " << parts << " rank " << r;
        EXPECT_LE(size, total / parts + 1) << total << " / " << parts << " rank " << r;
      }
    }
  // The rule ZeRO-1 documents: rank r owns [N*r/W, N*(r+1)/W).
  EXPECT_EQ(split_evenly(10, 4), (std::vector<std::int64_t>{0, 2, 5, 7, 10}));
  EXPECT_THROW(split_evenly(10, 0), core::Error);
  EXPECT_THROW(split_evenly(-1, 2), core::Error);
}

TEST(FlatSplit, RunsInRangeCutItemsAtTheRangesEdges) {
  // Items of 4, 6 and 5 elements with a gap of 2 before the last (an alignment gap).
  const std::vector<std::pair<std::int64_t, std::int64_t>> items = {{0, 4}, {4, 6}, {12, 5}};
  auto runs = runs_in_range(items, 2, 13);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].item, 0u);
  EXPECT_EQ(runs[0].start, 2);
  EXPECT_EQ(runs[0].length, 2);
  EXPECT_EQ(runs[1].item, 1u);
  EXPECT_EQ(runs[1].start, 0);
  EXPECT_EQ(runs[1].length, 6);
  EXPECT_EQ(runs[2].item, 2u);
  EXPECT_EQ(runs[2].start, 0);
  EXPECT_EQ(runs[2].length, 1);
  // A range inside the gap holds nothing; an empty range nothing.
  EXPECT_TRUE(runs_in_range(items, 10, 12).empty());
  EXPECT_TRUE(runs_in_range(items, 5, 5).empty());
  // Every split of the buffer covers each item's elements exactly once.
  for (int parts : {1, 2, 3, 5, 17}) {
    const std::vector<std::int64_t> o = split_evenly(17, parts);
    std::vector<int> seen(15, 0);
    for (int r = 0; r < parts; ++r)
      for (const RunInRange& run : runs_in_range(items, o[r], o[r + 1]))
        for (std::int64_t i = 0; i < run.length; ++i)
          ++seen[static_cast<std::size_t>((run.item == 0   ? 0
                                           : run.item == 1 ? 4
                                                           : 10) +
                                          run.start + i)];
    for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << parts << " at " << i;
  }
}

TEST(FlatSplit, PlaceInFindsAViewsOffsetAndRefusesOneOutside) {
  std::vector<float> memory(20);
  const kernels::Tensor buffer(memory.data(), kernels::DType::f32, kernels::Shape{16});
  EXPECT_EQ(place_in(buffer, buffer.view(5, kernels::Shape{2, 3})),
            (std::pair<std::int64_t, std::int64_t>{5, 6}));
  EXPECT_EQ(place_in(buffer, buffer), (std::pair<std::int64_t, std::int64_t>{0, 16}));
  const kernels::Tensor past(memory.data() + 12, kernels::DType::f32, kernels::Shape{8});
  EXPECT_THROW(place_in(buffer, past), core::Error);
  const kernels::Tensor before(memory.data(), kernels::DType::f32, kernels::Shape{1});
  EXPECT_THROW(place_in(buffer.view(4, kernels::Shape{4}), before), core::Error);
}

}  // namespace
}  // namespace tandem::dist
