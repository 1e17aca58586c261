// End-to-end: `tandem data batches` and `tandem data audit` on a fixture token set.
#include <gtest/gtest.h>

#include <unistd.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <array>
#include <cstdio>

#include <fmt/format.h>

#include "data_test_util.h"
#include "tandem/core/hash.h"

namespace tandem::data {
namespace {

struct Result {
  int code = -1;
  std::string out;
};

// `cmd` run by the shell, stdout and stderr together.
Result capture(const std::string& cmd) {
  Result r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Result run(const std::string& args) { return capture(std::string(TANDEM_BINARY) + " " + args); }

// `command` run by bash (for its ulimit).
Result run_shell(const std::string& command) {
  std::string quoted;
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return capture("bash -c '" + quoted + "'");
}

std::string write_config(const std::string& dir, const std::string& set = "a") {
  auto fx = testing::read_json_fixture("loader_" + set + ".json");
  std::string path = dir + "/data.yaml";
  testing::write_text(path, testing::fixture_config_yaml(fx, set, 34521));
  return path;
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::size_t start = 0, nl;
  while ((nl = out.find('\n', start)) != std::string::npos) {
    lines.push_back(nlohmann::json::parse(out.substr(start, nl - start)));
    start = nl + 1;
  }
  return lines;
}

const nlohmann::json& fixture_run(const nlohmann::json& fx, int world) {
  for (const auto& r : fx["runs"])
    if (r["seed"] == 34521 && r["world_size"] == world && r["epoch"] == 1) return r;
  throw std::runtime_error("fixture run not found");
}

TEST(Cli, BatchesPrintsOlmoCoreOrderPerRank) {
  std::string dir = testing::temp_dir("cli_batches");
  std::string cfg = write_config(dir);
  auto fx = testing::read_json_fixture("loader_a.json");
  const nlohmann::json* run2 = nullptr;
  for (const auto& r : fx["runs"])
    if (r["seed"] == 34521 && r["world_size"] == 2 && r["epoch"] == 1) run2 = &r;
  ASSERT_NE(run2, nullptr);
  Result r = run("data batches " + cfg + " --world-size 2 --from-step 3 --steps 2 --hash");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<nlohmann::json> lines;
  std::size_t start = 0, nl;
  while ((nl = r.out.find('\n', start)) != std::string::npos) {
    lines.push_back(nlohmann::json::parse(r.out.substr(start, nl - start)));
    start = nl + 1;
  }
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& line : lines) {
    int step = line["step"], rank = line["rank"];
    EXPECT_EQ(line["instances"], (*run2)["ranks"][rank][step]["ids"]) << line.dump();
    EXPECT_EQ(line["tokens_xxh64"].get<std::string>().size(), 16u);
  }
  EXPECT_EQ(lines[0]["step"], 3);
  EXPECT_EQ(lines[1]["rank"], 1);
}

// --tokens prints the ids themselves: hashed here as OLMo-core's batches were (int64 rows, in
// instance order), they must give OLMo-core's token hashes, and the masks OLMo-core's masks.
TEST(Cli, BatchesPrintsTheTokenIdsOlmoCoreHandsOut) {
  for (std::string set : {"a", "b"}) {
    std::string dir = testing::temp_dir("cli_tokens_" + set);
    std::string cfg = write_config(dir, set);
    auto fx = testing::read_json_fixture("loader_" + set + ".json");
    const nlohmann::json& run2 = fixture_run(fx, 2);
    // Steps 8-10 hold instances the repetition filter rejects (set b).
    Result r = run("data batches " + cfg + " --world-size 2 --from-step 8 --steps 3 --tokens");
    ASSERT_EQ(r.code, 0) << r.out;
    auto lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), 6u);
    const int seq = fx["sequence_length"];
    int rejected = 0;
    for (const auto& line : lines) {
      int step = line["step"], rank = line["rank"];
      const auto& want = run2["ranks"][rank][step];
      EXPECT_EQ(line["instances"], want["ids"]);
      std::vector<std::int64_t> flat;
      ASSERT_EQ(line["input_ids"].size(), line["instances"].size());
      for (const auto& row : line["input_ids"]) {
        ASSERT_EQ(row.size(), static_cast<std::size_t>(seq));
        for (const auto& id : row) flat.push_back(id.get<std::int64_t>());
      }
      EXPECT_EQ(core::sha256_hex(std::span<const std::uint8_t>(
                    reinterpret_cast<const std::uint8_t*>(flat.data()), flat.size() * 8)),
                want["tokens_sha256"].get<std::string>())
          << "set " << set << " step " << step << " rank " << rank;
      if (fx["instance_filter"].get<bool>()) {
        auto mask = want["mask"].get<std::vector<bool>>();
        ASSERT_EQ(line["instance_mask"].size(), mask.size());
        for (std::size_t k = 0; k < mask.size(); ++k) {
          EXPECT_EQ(line["instance_mask"][k].get<int>() != 0, mask[k]);
          rejected += mask[k] ? 0 : 1;
        }
      } else {
        EXPECT_FALSE(line.contains("instance_mask"));
      }
    }
    if (fx["instance_filter"].get<bool>()) {
      EXPECT_GT(rejected, 0);
    }
  }
}

TEST(Cli, BatchesResumesFromASavedStateAndRefusesChangedSeed) {
  std::string dir = testing::temp_dir("cli_state");
  std::string cfg = write_config(dir);
  Result a = run("data batches " + cfg + " --steps 5 --save-state " + dir + "/s.json");
  ASSERT_EQ(a.code, 0) << a.out;
  Result b = run("data batches " + cfg + " --world-size 4 --rank 3 --steps 1 --resume-state " +
                 dir + "/s.json");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("\"step\":5"), std::string::npos) << b.out;
  Result c =
      run("data batches " + cfg + " data.seed=7 --steps 1 --resume-state " + dir + "/s.json");
  EXPECT_NE(c.code, 0);
  EXPECT_NE(c.out.find("seed 34521 but the config has seed 7"), std::string::npos) << c.out;
}

TEST(Cli, AuditExitsZeroWhenEverythingHolds) {
  std::string dir = testing::temp_dir("cli_audit");
  std::string cfg = write_config(dir);
  Result r = run("data audit " + cfg + " --world-sizes 1,2,4,8 --resume-at '10:8>2' --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["resumes_checked"].size(), 1u);
  Result text = run("data audit " + cfg);
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("OK:"), std::string::npos);
}

// The committed demo mixture (configs/data/demo-source-mixture.yaml) from the command line: the
// audit proves its order and reports each source's share; the loader hands out its batches.
TEST(Cli, AuditAndBatchesOfTheDemoSourceMixture) {
  const std::string cfg = std::string(TANDEM_SOURCE_DIR) + "/configs/data/demo-source-mixture.yaml";
  Result r = run("data audit " + cfg + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_TRUE(j.contains("mixture")) << r.out;
  const auto& m = j["mixture"];
  EXPECT_EQ(m["requested_tokens"], 4500);
  EXPECT_EQ(m["total_tokens"].get<std::uint64_t>(), j["num_instances"].get<std::uint64_t>() * 32);
  std::uint64_t selected = 0;
  for (const auto& s : m["sources"]) selected += s["selected"].get<std::uint64_t>();
  EXPECT_EQ(selected, m["total_tokens"].get<std::uint64_t>());
  EXPECT_EQ(m["sources"][1]["name"], "math");
  EXPECT_GT(m["sources"][1]["selected"].get<std::uint64_t>(),
            m["sources"][1]["population"].get<std::uint64_t>());  // upsampled
  Result b = run("data batches " + cfg + " --world-size 2 --steps 2");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(json_lines(b.out).size(), 4u) << b.out;  // 2 steps x 2 ranks
}

// AI2's mixes list thousands of token files, each held open; shells often start with a soft limit
// of 1024 descriptors. tandem takes the hard limit; under a hard limit too low, it says so before
// opening any (running out half-way also starves logs, checkpoints and the sanitizers' own checks).
TEST(Cli, MoreTokenFilesThanTheSoftDescriptorLimit) {
  struct rlimit lim {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max < 512) GTEST_SKIP() << "the hard descriptor limit " << lim.rlim_max << " < 512";
  const std::string dir = testing::temp_dir("cli_many_files");
  for (int i = 0; i < 300; ++i)
    testing::write_tokens<std::uint16_t>(
        fmt::format("{}/part-{:03d}.npy", dir, i),
        std::vector<std::uint16_t>(40, static_cast<std::uint16_t>(i)));
  const std::string cfg = dir + "/data.yaml";
  testing::write_text(cfg, "data:\n  paths: [\"" + dir +
                               "/part-*.npy\"]\n"
                               "  sequence_length: 16\n  global_batch_size: 64\n  seed: 3\n"
                               "  vocab_size: 1000\n  eos_token_id: 998\n  pad_token_id: 999\n");
  const std::string audit = std::string(TANDEM_BINARY) + " data audit " + cfg + " --no-duplicates";
  Result soft = run_shell("ulimit -Sn 100 && " + audit);
  EXPECT_EQ(soft.code, 0) << soft.out;
  EXPECT_NE(soft.out.find("600 instances"), std::string::npos) << soft.out;
  Result hard = run_shell("ulimit -n 100 && " + audit);
  EXPECT_NE(hard.code, 0) << hard.out;
  EXPECT_NE(hard.out.find("the data opens 300 token files, one descriptor each, and this "
                          "process may hold 100"),
            std::string::npos)
      << hard.out;
  EXPECT_NE(hard.out.find("raise `ulimit -n`"), std::string::npos) << hard.out;
}

TEST(Cli, BadInputGivesAClearErrorAndNonZeroExit) {
  std::string dir = testing::temp_dir("cli_bad");
  testing::write_text(dir + "/data.yaml", "data: {paths: [missing.npy], sequence_length: 4}\n");
  Result r = run("data batches " + dir + "/data.yaml");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("missing.npy does not exist"), std::string::npos) << r.out;
  Result w = run("data audit " + write_config(dir) + " --world-sizes 1,x");
  EXPECT_NE(w.code, 0);
  EXPECT_NE(w.out.find("'x' is not a positive integer"), std::string::npos) << w.out;
}

}  // namespace
}  // namespace tandem::data
