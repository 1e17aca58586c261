// A parity comparison that cannot fail must not report a pass: a reference of NaNs (NaN loses
// every max()), one vocabulary column (a one-way softmax is constant, so KL is 0) or no tokens
// is an error naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tandem/core/error.h"
#include "tandem/eval/parity.h"

namespace tandem {
namespace {

using namespace core;
using namespace eval;

std::string compare_error(const std::vector<float>& ours, std::int64_t ours_vocab,
                          const std::vector<float>& ref, std::int64_t ref_vocab) {
  try {
    LogitParity p = compare_logits(ours, ours_vocab, ref, ref_vocab);
    return "no error: max_kl " + std::to_string(p.max_kl) + " top1 " +
           std::to_string(p.top1_agreement);
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(ParityGuard, AllNanReferenceIsAnError) {
  const std::vector<float> ours = {1, 2, 3, 4, 5, 6};
  const std::vector<float> ref(6, std::numeric_limits<float>::quiet_NaN());
  const std::string e = compare_error(ours, 3, ref, 3);
  EXPECT_NE(e.find("reference logit 0 (token 0, column 0) is nan"), std::string::npos) << e;
}

TEST(ParityGuard, InfiniteLogitOfOursIsAnError) {
  std::vector<float> ours = {1, 2, 3, 4, 5, 6};
  ours[4] = std::numeric_limits<float>::infinity();
  const std::vector<float> ref = {1, 2, 3, 4, 5, 6};
  const std::string e = compare_error(ours, 3, ref, 3);
  EXPECT_NE(e.find("our logit 4 (token 1, column 1) is inf"), std::string::npos) << e;
}

TEST(ParityGuard, OneVocabularyColumnIsAnError) {
  const std::vector<float> ours = {1, 2, 3, 4};
  const std::vector<float> ref = {-7, 9};  // two tokens, one column: KL would be 0
  const std::string e = compare_error(ours, 2, ref, 1);
  EXPECT_NE(e.find("1 vocabulary column"), std::string::npos) << e;
}

TEST(ParityGuard, ZeroTokensIsAnError) {
  const std::string e = compare_error({}, 4, {}, 4);
  EXPECT_NE(e.find("no tokens"), std::string::npos) << e;
}

TEST(ParityGuard, AGenuineComparisonStillWorks) {
  const std::vector<float> ours = {1, 2, 3, 3, 2, 1};
  const std::vector<float> ref = {1, 2, 3, 3, 2, 1.5f};
  LogitParity p = compare_logits(ours, 3, ref, 3);
  EXPECT_EQ(p.tokens, 2);
  EXPECT_GT(p.max_kl, 0.0);
  EXPECT_DOUBLE_EQ(p.top1_agreement, 1.0);
}

}  // namespace
}  // namespace tandem
