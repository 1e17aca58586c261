// dist/rank_agreement.h on ranks that are threads of this process (support/thread_communicator.h):
// one rank's text reaches all, the lowest failing rank's message reaches all, a value that differs
// on one rank is seen as differing everywhere, and work items are shared out by size.
#include "tandem/dist/rank_agreement.h"

#include <gtest/gtest.h>

#include "../support/thread_communicator.h"

namespace tandem {
namespace {

using testing::ThreadRanks;

TEST(RankAgreement, BroadcastStringGivesEveryRankTheRootsText) {
  const std::string long_text(100000, 'x');
  for (const std::string& text : {std::string(), std::string("step-000004"), long_text}) {
    std::vector<std::string> got(3);
    auto errors = ThreadRanks(3).run([&](dist::Communicator& comm) {
      // Every rank passes its own text; only root 2's counts.
      const std::string mine = comm.rank() == 2 ? text : "rank " + std::to_string(comm.rank());
      got[static_cast<std::size_t>(comm.rank())] = dist::broadcast_string(mine, 2, comm);
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
      EXPECT_EQ(got[static_cast<std::size_t>(r)], text) << "rank " << r;
    }
  }
}

TEST(RankAgreement, FirstFailureIsTheLowestFailingRanksMessageOnEveryRank) {
  std::vector<std::optional<dist::RankFailure>> got(4);
  ThreadRanks(4).run([&](dist::Communicator& comm) {
    // Ranks 1 and 3 fail, with different messages.
    const std::string error =
        comm.rank() % 2 == 1 ? "disk full on rank " + std::to_string(comm.rank()) : "";
    got[static_cast<std::size_t>(comm.rank())] = dist::first_failure(error, comm);
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(got[static_cast<std::size_t>(r)].has_value()) << "rank " << r;
    EXPECT_EQ(got[static_cast<std::size_t>(r)]->rank, 1);
    EXPECT_EQ(got[static_cast<std::size_t>(r)]->message, "disk full on rank 1");
  }
  std::vector<std::string> thrown = ThreadRanks(4).run([&](dist::Communicator& comm) {
    dist::fail_if_any_rank_failed(comm.rank() == 3 ? "bad shard" : "", comm);
  });
  for (const std::string& e : thrown) EXPECT_EQ(e, "bad shard");
  thrown = ThreadRanks(4).run([&](dist::Communicator& comm) {
    EXPECT_FALSE(dist::first_failure("", comm).has_value());
    dist::fail_if_any_rank_failed("", comm);
  });
  for (const std::string& e : thrown) EXPECT_EQ(e, "");
}

TEST(RankAgreement, SameOnAllRanksSeesOneRankDiffering) {
  for (int odd_rank : {-1, 0, 2}) {
    std::vector<int> same(3, -1);
    ThreadRanks(3).run([&](dist::Communicator& comm) {
      const std::uint64_t value = comm.rank() == odd_rank ? 7 : 0x0123456789abcdefull;
      same[static_cast<std::size_t>(comm.rank())] = dist::same_on_all_ranks(value, comm);
    });
    for (int r = 0; r < 3; ++r)
      EXPECT_EQ(same[static_cast<std::size_t>(r)], odd_rank < 0 ? 1 : 0)
          << "rank " << r << ", differing rank " << odd_rank;
  }
}

TEST(RankAgreement, ShareBySizeGivesTheLargestFirstToTheLeastLoadedRank) {
  // 10 -> rank 0; 7 -> 1; 3 -> 1 (7 < 10); the other 3 -> 0 (10 = 10: the lower rank); 1 -> 1.
  EXPECT_EQ(dist::share_by_size({10, 1, 7, 3, 3}, 2), (std::vector<int>{0, 1, 1, 1, 0}));
  EXPECT_EQ(dist::share_by_size({10, 1, 7, 3, 3}, 1), (std::vector<int>{0, 0, 0, 0, 0}));
  // More ranks than items: one each, the largest on rank 0.
  EXPECT_EQ(dist::share_by_size({5, 9}, 4), (std::vector<int>{1, 0}));
  EXPECT_TRUE(dist::share_by_size({}, 3).empty());
  // Eight equal shards over four ranks: two each.
  const std::vector<int> even = dist::share_by_size(std::vector<std::uint64_t>(8, 100), 4);
  std::vector<int> count(4, 0);
  for (int r : even) ++count[static_cast<std::size_t>(r)];
  EXPECT_EQ(count, (std::vector<int>{2, 2, 2, 2}));
  // Pinned items go to their rank and count in its load: 10 on rank 1; then 7 to rank 0, 3 to
  // rank 0 (7 < 10), the other 3 to rank 0 (10 = 10: the lower rank), 1 to rank 1 (10 < 13).
  EXPECT_EQ(dist::share_by_size({10, 1, 7, 3, 3}, 2, {1, -1, -1, -1, -1}),
            (std::vector<int>{1, 1, 0, 0, 0}));
  EXPECT_THROW(dist::share_by_size({1, 2}, 2, {2, -1}), core::Error);
  EXPECT_THROW(dist::share_by_size({1, 2}, 2, {0}), core::Error);
}

}  // namespace
}  // namespace tandem
