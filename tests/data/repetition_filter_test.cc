// The repetition filter against OLMo-core's find_periodic_sequences (repetition.json).
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/repetition_filter.h"

namespace tandem::data {
namespace {

TEST(RepetitionFilter, MatchesOlmoCoreOnRandomAndAdversarialArrays) {
  auto fx = testing::read_json_fixture("repetition.json");
  RepetitionFilterConfig cfg{fx["max_period"], fx["min_period"], fx["max_count"]};
  std::size_t cases = 0, rejected = 0;
  for (const auto& c : fx["cases"]) {
    auto tokens = c["tokens"].get<std::vector<std::int64_t>>();
    std::string name = c["name"];
    if (!c["error"].is_null()) {
      EXPECT_THROW(find_periodic_sequences(tokens, cfg.max_period, cfg.min_period), core::Error)
          << name;
      continue;
    }
    std::vector<Repetition> want;
    for (const auto& t : c["found"]) want.push_back({t[0], t[1], t[2], t[3]});
    EXPECT_EQ(find_periodic_sequences(tokens, cfg.max_period, cfg.min_period), want) << name;
    bool r = is_rejected_by_repetition(tokens, cfg);
    EXPECT_EQ(r, c["rejected"].get<bool>()) << name;
    rejected += r;
    ++cases;
  }
  EXPECT_GE(cases, 400u);
  EXPECT_GE(rejected, 20u);  // the fixture exercises both answers
}

TEST(RepetitionFilter, ThresholdIsThirtyTwoRepeats) {
  std::vector<std::int64_t> base;
  for (int i = 0; i < 31; ++i) base.insert(base.end(), {5, 9, 2});
  std::vector<std::int64_t> with_more = base;
  with_more.insert(with_more.end(), {5, 9, 2});
  RepetitionFilterConfig cfg;
  // Surround with distinct tokens so that only whole repeats count.
  auto wrap = [](std::vector<std::int64_t> v) {
    v.insert(v.begin(), {100, 101});
    v.insert(v.end(), {102, 103});
    return v;
  };
  EXPECT_FALSE(is_rejected_by_repetition(wrap(base), cfg));
  EXPECT_TRUE(is_rejected_by_repetition(wrap(with_more), cfg));
}

TEST(RepetitionFilter, MaskValueInArrayIsRefusedLikeTheReference) {
  std::vector<std::int64_t> v = {1, 2, -1, 3};
  EXPECT_THROW(find_periodic_sequences(v, 13), core::Error);
}

}  // namespace
}  // namespace tandem::data
