// trainer.ephemeral_save_interval (OLMo-core's ephemeral checkpoints): frequent resume points
// between the kept checkpoints, each removed once a newer checkpoint has been saved and verifies,
// and not counted in keep_last. A run killed after an ephemeral save resumes from it exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/io/json.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using testing::fixture;
using testing::run_shell;
using testing::run_tandem;

// Kept every 4 steps, ephemeral every 3, the 2 newest kept ones kept.
std::string ephemeral_args(const std::string& run, int steps, int keep = 2) {
  return fixture("train/parity.yaml") + " trainer.init_from=" + fixture("train/init_hf") +
         " trainer.save_folder=" + run + " trainer.max_steps=" + std::to_string(steps) +
         " trainer.save_interval=4 trainer.ephemeral_save_interval=3 trainer.keep_last=" +
         std::to_string(keep) + " trainer.progress=false evaluation.interval=0";
}

std::vector<std::string> ephemeral_test_names(const std::string& run) {
  std::vector<std::string> names;
  for (const std::string& dir : train::list_checkpoints(run + "/checkpoints"))
    names.push_back(fs::path(dir).filename().string());
  return names;
}

bool ephemeral_mark(const std::string& run, const std::string& name) {
  return io::read_json_file(run + "/checkpoints/" + name + "/state.json").value("ephemeral", false);
}

TEST(EphemeralCheckpoints, RemovedOnceANewerOneVerifies) {
  const std::string run = testing::temp_dir("ephemeral_straight");
  auto r = run_tandem("train " + ephemeral_args(run, 7));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Saved: 3 (ephemeral), 4, 6 (ephemeral), 7 (the last step).
  for (const char* line :
       {"saved checkpoint step-000003 (ephemeral)", "saved checkpoint step-000004 in",
        "saved checkpoint step-000006 (ephemeral)", "saved checkpoint step-000007 (final)"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  // Both ephemeral ones went as soon as a newer checkpoint verified; keep_last=2 kept 7 and 4.
  EXPECT_EQ(ephemeral_test_names(run), (std::vector<std::string>{"step-000004", "step-000007"}));
  EXPECT_FALSE(ephemeral_mark(run, "step-000004"));
  EXPECT_FALSE(ephemeral_mark(run, "step-000007"));

  // An ephemeral step that is also the run's last is its final checkpoint, kept.
  const std::string last = testing::temp_dir("ephemeral_last_step");
  r = run_tandem("train " + ephemeral_args(last, 6));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("saved checkpoint step-000006 (final)"), std::string::npos) << r.output;
  EXPECT_EQ(ephemeral_test_names(last), (std::vector<std::string>{"step-000004", "step-000006"}));
  EXPECT_FALSE(ephemeral_mark(last, "step-000006"));
}

TEST(EphemeralCheckpoints, AKilledRunResumesFromItsEphemeralCheckpointExactly) {
  const std::string straight = testing::temp_dir("ephemeral_reference");
  auto r = run_tandem("train " + ephemeral_args(straight, 9, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Killed right after the third save (step 6, ephemeral) was renamed into place.
  const std::string run = testing::temp_dir("ephemeral_killed");
  r = run_shell("TANDEM_FAULT=checkpoint.renamed:3 " + std::string(TANDEM_BINARY) + " train " +
                ephemeral_args(run, 9, 3));
  EXPECT_NE(r.exit_code, 0) << r.output;
  ASSERT_EQ(ephemeral_test_names(run), (std::vector<std::string>{"step-000004", "step-000006"}))
      << r.output;
  EXPECT_TRUE(ephemeral_mark(run, "step-000006"));
  EXPECT_NO_THROW(train::verify_checkpoint(run + "/checkpoints/step-000006"));

  // The resume takes the newest checkpoint, ephemeral or not, and continues bit for bit; the next
  // save (8) supersedes it.
  r = run_tandem("train " + ephemeral_args(run, 9, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 6"), std::string::npos) << r.output;
  EXPECT_EQ(ephemeral_test_names(run),
            (std::vector<std::string>{"step-000004", "step-000008", "step-000009"}));
  const auto a = testing::read_metrics(straight + "/metrics.jsonl");
  const auto b = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 9u);
  ASSERT_EQ(b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["train/loss"], b[i]["train/loss"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["train/grad_norm"], b[i]["train/grad_norm"]) << "step " << i + 1;
  }
}

TEST(EphemeralCheckpoints, StayWhileNoNewerOneVerifiesAndDoNotCountInKeepLast) {
  // A run stopped after its ephemeral step 6 (keep 1): 4 is kept, 6 is the newest.
  const std::string run = testing::temp_dir("ephemeral_damaged_newer");
  auto r = run_shell("TANDEM_FAULT=checkpoint.renamed:3 " + std::string(TANDEM_BINARY) + " train " +
                     ephemeral_args(run, 9, 1));
  ASSERT_EQ(ephemeral_test_names(run), (std::vector<std::string>{"step-000004", "step-000006"}))
      << r.output;
  // A newer folder that does not verify (step-000008 holding step 4's files) supersedes nothing,
  // and the ephemeral 6 does not count in keep_last=1: 4 stays too.
  const std::string cps = run + "/checkpoints/";
  fs::copy(cps + "step-000004", cps + "step-000008", fs::copy_options::recursive);
  train::prune_checkpoints(run + "/checkpoints", 1, 8);
  EXPECT_EQ(ephemeral_test_names(run),
            (std::vector<std::string>{"step-000004", "step-000006", "step-000008"}));
}

TEST(EphemeralCheckpoints, IntervalMustBeShorterThanTheSaveInterval) {
  const std::string run = testing::temp_dir("ephemeral_bad_interval");
  auto r = run_tandem("train " + fixture("train/parity.yaml") + " trainer.init_from=" +
                      fixture("train/init_hf") + " trainer.save_folder=" + run +
                      " trainer.max_steps=2 trainer.save_interval=4"
                      " trainer.ephemeral_save_interval=4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(
                "key 'trainer.ephemeral_save_interval' (4) must be less than save_interval (4)"),
            std::string::npos)
      << r.output;
  r = run_tandem("train " + fixture("train/parity.yaml") +
                 " trainer.init_from=" + fixture("train/init_hf") + " trainer.save_folder=" + run +
                 " trainer.max_steps=2 trainer.ephemeral_save_interval=-1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("key 'trainer.ephemeral_save_interval' must be >= 0"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace tandem
