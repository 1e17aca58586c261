#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "tandem/core/error.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using namespace testing;

TEST(Embedding, ForwardGathersRows) {
  const i64 T = 9, d = 13, vocab = 37;
  auto table = random_floats(vocab * d, 1);
  std::vector<std::int64_t> ids = {0, 36, 5, 5, 12, 0, 1, 36, 20};
  std::vector<float> out(T * d);
  embedding_forward(ids.data(), table.data(), out.data(), T, d, vocab);
  for (i64 t = 0; t < T; ++t)
    for (i64 c = 0; c < d; ++c) EXPECT_EQ(out[t * d + c], table[ids[t] * d + c]);
}

TEST(Embedding, OutOfRangeIdIsAnErrorNamingIdAndPosition) {
  const i64 d = 3, vocab = 10;
  std::vector<float> table(vocab * d), out(4 * d);
  for (std::int64_t bad : {std::int64_t{10}, std::int64_t{-1}, std::int64_t{1} << 40}) {
    std::vector<std::int64_t> ids = {1, 2, bad, 3};
    try {
      embedding_forward(ids.data(), table.data(), out.data(), 4, d, vocab);
      FAIL() << "no error for id " << bad;
    } catch (const tandem::core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
    }
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const i64 T = 11, d = 13, vocab = 37;
  std::vector<std::int64_t> ids = {3, 7, 3, 36, 0, 7, 3, 20, 20, 1, 36};
  auto table = random_floats(vocab * d, 2);
  auto dout = random_floats(T * d, 3);
  auto ref = [&](const std::vector<double>& tab) {
    double s = 0.0;
    for (i64 t = 0; t < T; ++t)
      for (i64 c = 0; c < d; ++c) s += tab[ids[t] * d + c] * dout[t * d + c];
    return s;
  };
  auto numeric = numeric_gradient(ref, to_double(table));
  std::vector<float> dtable(vocab * d, 0.0f);
  embedding_backward(ids.data(), dout.data(), dtable.data(), T, d, vocab);
  EXPECT_LT(max_scaled_gradient_error(dtable, numeric), kGradTolerance);
  // Accumulates.
  auto twice = dtable;
  embedding_backward(ids.data(), dout.data(), twice.data(), T, d, vocab);
  for (std::size_t i = 0; i < twice.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * dtable[i]);
}

// The backward refuses a bad id before adding anything (it would otherwise write outside the
// table's gradient), naming it and its position as the forward does.
TEST(Embedding, BackwardRefusesAnOutOfRangeIdBeforeAddingAnything) {
  const i64 d = 3, vocab = 10;
  const auto dout = random_floats(4 * d, 4);
  for (std::int64_t bad : {std::int64_t{10}, std::int64_t{-1}}) {
    std::vector<std::int64_t> ids = {1, 2, 1, bad};
    std::vector<float> dtable(vocab * d, 0.5f);
    try {
      embedding_backward(ids.data(), dout.data(), dtable.data(), 4, d, vocab);
      FAIL() << "no error for id " << bad;
    } catch (const tandem::core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("position 3"), std::string::npos) << msg;
    }
    EXPECT_EQ(dtable, std::vector<float>(vocab * d, 0.5f));
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
