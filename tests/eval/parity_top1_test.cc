// Top-1 disagreements in a logit comparison are split by the reference's own gap between the two
// tokens: a near tie (at most kTop1TieMargin of the reference's largest |logit|), which fp32
// rounding decides, or a flip, which no rounding explains.
#include <gtest/gtest.h>

#include "tandem/eval/parity.h"

namespace tandem {
namespace {

using eval::compare_logits;
using eval::kTop1TieMargin;
using eval::LogitParity;

TEST(ParityTop1, AgreementHasNoDisagreements) {
  const std::vector<float> ref = {0, 3, 1, 2, 0, 1};
  const LogitParity p = compare_logits(ref, 3, ref, 3);
  EXPECT_DOUBLE_EQ(p.top1_agreement, 1.0);
  EXPECT_EQ(p.top1_near_ties, 0);
  EXPECT_EQ(p.top1_flips, 0);
}

// One position whose reference logits for its two best tokens are `gap` apart (the largest 1),
// where ours prefers the second.
LogitParity one_disagreement(double gap) {
  const float second = 1 - static_cast<float>(gap);
  return compare_logits({0, second, 1}, 3, {0, 1, second}, 3);
}

TEST(ParityTop1, ADisagreementWithinTheMarginIsANearTie) {
  const LogitParity p = one_disagreement(0.5 * kTop1TieMargin);
  EXPECT_DOUBLE_EQ(p.top1_agreement, 0.0);
  EXPECT_EQ(p.top1_near_ties, 1);
  EXPECT_EQ(p.top1_flips, 0);
}

TEST(ParityTop1, ADisagreementBeyondTheMarginIsAFlip) {
  const LogitParity p = one_disagreement(2 * kTop1TieMargin);
  EXPECT_DOUBLE_EQ(p.top1_agreement, 0.0);
  EXPECT_EQ(p.top1_near_ties, 0);
  EXPECT_EQ(p.top1_flips, 1);
}

TEST(ParityTop1, TheMarginIsRelativeToTheLargestReferenceLogitOfAllTokens) {
  // Token 0's gap of 0.5e-3 is 5 margins of its own largest logit (1) but half a margin of the
  // comparison's largest (10 on token 1): a near tie. Token 1 flips by a wide gap.
  const float gap = static_cast<float>(5 * kTop1TieMargin);
  const std::vector<float> ref = {0, 1, 1 - gap, 10, -10, 0};
  const std::vector<float> ours = {0, 1 - gap, 1, -10, 10, 0};
  const LogitParity p = compare_logits(ours, 3, ref, 3);
  EXPECT_DOUBLE_EQ(p.max_ref_abs, 10.0);
  EXPECT_EQ(p.top1_near_ties, 1);
  EXPECT_EQ(p.top1_flips, 1);
}

TEST(ParityTop1, AnAllZeroReferenceHasNoNearTies) {
  // No yardstick: a top token of ours other than the reference's first column is a flip.
  const std::vector<float> ref(3, 0.0f);
  const std::vector<float> ours = {0, 1, 0};
  const LogitParity p = compare_logits(ours, 3, ref, 3);
  EXPECT_EQ(p.top1_near_ties, 0);
  EXPECT_EQ(p.top1_flips, 1);
}

TEST(ParityTop1, ColumnsBeyondTheReferencesAreNotCandidates) {
  // Our padded vocabulary's extra column holds the largest logit; only the shared columns count.
  const std::vector<float> ref = {0, 2, 1};
  const std::vector<float> ours = {0, 2, 1, 50};
  const LogitParity p = compare_logits(ours, 4, ref, 3);
  EXPECT_DOUBLE_EQ(p.top1_agreement, 1.0);
  EXPECT_EQ(p.top1_flips, 0);
}

}  // namespace
}  // namespace tandem
