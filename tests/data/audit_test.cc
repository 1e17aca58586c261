// The audit: passes on a correct loader, fails loudly on the double-sharding fault, reports
// duplicated content as a warning.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/audit.h"

namespace tandem::data {
namespace {

DataConfig set_config(const std::string& set, std::int64_t seed = 34521) {
  auto fx = testing::read_json_fixture("loader_" + set + ".json");
  return testing::parse_yaml(testing::fixture_config_yaml(fx, set, seed));
}

TEST(Audit, PassesForEveryWorldSizeAndResumePoint) {
  for (const std::string set : {"a", "b"}) {
    DataConfig config = set_config(set);
    AuditOptions opts;
    opts.world_sizes = {1, 2, 4, 8};
    opts.resume_points = {parse_resume_point("5:2"), parse_resume_point("7:4>1"),
                          parse_resume_point("35:1>4")};
    AuditReport r = run_audit(config, opts);
    EXPECT_TRUE(r.ok) << r.to_text();
    EXPECT_EQ(r.violation_count, 0u);
    EXPECT_EQ(r.resumes_checked.size(), 3u);
    if (set == "a") {
      EXPECT_EQ(r.world_sizes_checked, (std::vector<std::uint64_t>{1, 2, 4, 8}));
      EXPECT_EQ(r.dropped_per_epoch, 269u - 33u * 8u);
    } else {
      EXPECT_EQ(r.world_sizes_checked, (std::vector<std::uint64_t>{1, 2, 4}));  // 12 per batch
      EXPECT_EQ(r.notes.size(), 1u);
    }
  }
}

TEST(Audit, DoubleShardingFaultFailsLoudly) {
  DataConfig config = set_config("a");
  AuditOptions opts;
  opts.world_sizes = {1, 2, 4};
  opts.fault = LoaderFault::kDoubleShard;
  AuditReport r = run_audit(config, opts);
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.violation_count, 100u);
  ASSERT_FALSE(r.violations.empty());
  EXPECT_NE(r.violations[0].find("world size 2"), std::string::npos) << r.violations[0];
  EXPECT_NE(r.to_text().find("FAILED"), std::string::npos);
  EXPECT_FALSE(r.to_json()["ok"].get<bool>());
}

TEST(Audit, ReportsDuplicatedContentAsAWarning) {
  std::string dir = testing::temp_dir("dups");
  std::vector<std::uint16_t> a, b;
  for (int i = 0; i < 64; ++i) a.push_back(static_cast<std::uint16_t>(i * 3 + 1));
  b = a;                                         // file b repeats file a: 4 duplicated instances
  b.insert(b.end(), a.begin(), a.begin() + 16);  // and one more copy of instance 0
  testing::write_tokens(dir + "/a.npy", a);
  testing::write_tokens(dir + "/b.npy", b);
  DataConfig config = testing::parse_yaml(
      "data: {paths: [a.npy, b.npy], sequence_length: 16, global_batch_size: 32, seed: 1, "
      "vocab_size: 1000, eos_token_id: 0, pad_token_id: 1}",
      dir);
  AuditOptions opts;
  opts.world_sizes = {1, 2};
  AuditReport r = run_audit(config, opts);
  EXPECT_TRUE(r.ok) << r.to_text();
  EXPECT_EQ(r.duplicate_groups, 4u);
  EXPECT_EQ(r.duplicate_instances, 5u);
  EXPECT_NE(r.to_text().find("warning"), std::string::npos);
}

TEST(Audit, ParsesResumePoints) {
  auto p = parse_resume_point("12:4");
  EXPECT_EQ(p.step, 12u);
  EXPECT_EQ(p.world_size, 4u);
  EXPECT_EQ(p.before_world_size, 0u);
  p = parse_resume_point("3:8>2");
  EXPECT_EQ(p.before_world_size, 8u);
  EXPECT_EQ(p.world_size, 2u);
  EXPECT_THROW(parse_resume_point("12"), core::Error);
  EXPECT_THROW(parse_resume_point("x:2"), core::Error);
  EXPECT_THROW(parse_resume_point("3:0"), core::Error);
}

}  // namespace
}  // namespace tandem::data
