// `tandem plan` at W=2 under mpirun: for DDP, ZeRO-1 and FSDP (with and without prefetch) the
// planned parameters, Adam moments and backend memory per rank are what rank 0 of `tandem train`
// logs and measures in its first step.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "dist_test_util.h"

namespace tandem {
namespace {

using namespace dist_testing;
namespace fs = std::filesystem;

// The JSON header's length, the first 8 bytes (little-endian) of a safetensors file.
std::uint64_t safetensors_header_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[8] = {};
  in.read(reinterpret_cast<char*>(b), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | b[i];
  return n;
}

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
    // The final checkpoint: two writers, each its weight and moment shards; the tensor data is the
    // plan's (each file's safetensors header, 8 bytes of length plus its JSON, aside).
    ASSERT_EQ(plan["checkpoint"]["writers"], 2);
    double largest = 0, all = 0;
    for (int rank = 0; rank < 2; ++rank) {
      double data = 0;
      for (const char* part : {"model", "optim"}) {
        const std::string file =
            run + fmt::format("/checkpoints/step-000001/{}/shard-{:05d}-of-00002.safetensors", part,
                              rank);
        ASSERT_TRUE(fs::exists(file)) << file;
        data += static_cast<double>(fs::file_size(file) - 8 - safetensors_header_bytes(file));
      }
      largest = std::max(largest, data);
      all += data;
    }
    EXPECT_EQ(all, plan["checkpoint"]["bytes"].get<double>());
    EXPECT_EQ(largest, plan["checkpoint"]["bytes_per_writer"].get<double>());
  }
}

}  // namespace
}  // namespace tandem
