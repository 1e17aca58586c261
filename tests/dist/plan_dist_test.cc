// `tandem plan` at W=2 under mpirun: for DDP, ZeRO-1 and FSDP (with and without prefetch) the
// planned parameters, Adam moments and backend memory per rank are what rank 0 of `tandem train`
// logs and measures in its first step.
#include <gtest/gtest.h>

#include <regex>

#include "dist_test_util.h"

namespace tandem {
namespace {

using namespace dist_testing;

std::int64_t logged(const std::string& output, const std::string& pattern) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex(pattern))) << pattern << "\n" << output;
  return m.empty() ? -1 : std::stoll(m[1]);
}

TEST(PlanDist, MatchesRankZeroAtWorldSizeTwo) {
  for (const std::string variant : {"ddp", "zero1", "fsdp", "fsdp dist.prefetch=false"}) {
    SCOPED_TRACE(variant);
    const std::string strategy = variant.substr(0, variant.find(' '));
    const std::string extra =
        variant.size() > strategy.size() ? variant.substr(strategy.size()) : "";
    auto p = run_shell(tandem_command(1, "plan " + fixture("train/parity.yaml") +
                                             " --device cpu --json --world-size 2 --strategy " +
                                             strategy + " data.micro_batch_size=2" + extra));
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const nlohmann::json plan = nlohmann::json::parse(p.output.substr(p.output.find('{')));
    const std::string run = temp_dir("plan_dist_" + strategy + (extra.empty() ? "" : "_nopf"));
    auto r = run_shell(
        tandem_command(2, "train " + train_args(run, 1) + " dist.strategy=" + strategy + extra));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(plan["memory"]["parameters"].get<double>(),
              logged(r.output, R"(parameters (\d+) B)"));
    EXPECT_EQ(plan["memory"]["optimiser state"].get<double>(),
              logged(r.output, R"(Adam moments (\d+) B)"));
    EXPECT_EQ(plan["memory"]["activations"].get<double>(),
              logged(r.output, R"(saved activations (\d+) B)"));
    EXPECT_EQ(plan["memory_backend"].get<double>(),
              logged(r.output, R"(after the first step: \d+ B \([\d.]+ MiB\) held, peak (\d+) B)"));
  }
}

}  // namespace
}  // namespace tandem
