// A GoogleTest program whose tests pass, fail, skip and crash (abort the process), in that mix:
// what bench/gtest_resumable.py must get through on the device check. Run by
// gtest_resumable_check.py, not as a test suite of its own.
#include <gtest/gtest.h>

#include <cstdlib>

namespace {

TEST(Probe, PassesFirst) { SUCCEED(); }
TEST(Probe, Crashes) { std::abort(); }
TEST(Probe, FailsAfterTheCrash) { EXPECT_EQ(1, 2) << "a failure is not a crash"; }
TEST(Probe, SkipsAfterTheCrash) { GTEST_SKIP() << "a skip is not a crash"; }

class ProbeParam : public ::testing::TestWithParam<int> {};
TEST_P(ProbeParam, CrashesForOne) {
  if (GetParam() == 1) std::abort();
}
INSTANTIATE_TEST_SUITE_P(Values, ProbeParam, ::testing::Values(0, 1, 2));

TEST(ProbeLast, Passes) { SUCCEED(); }

}  // namespace
