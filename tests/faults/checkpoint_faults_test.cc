// The fault matrix, checkpoint half: SIGKILL inside every stage of a checkpoint write (repeated
// on one run) and at random moments, a disk that fills during a save, each part of a checkpoint
// damaged, stray folders beside the checkpoints, and a run directory whose checkpoints all fail.
// Each ends with the previous checkpoint intact, a message that names what happened, and a
// resume that is bit-identical to an uninterrupted run.
#include <sys/mount.h>

#include <random>

#include "fault_test_util.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;
using namespace train;

using namespace fault_testing;

TEST(FaultMatrix, KillNineInsideEveryStageOfACheckpointWriteRepeatedly) {
  const int steps = 10;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir("fault_kill_stages");
  // The first round is killed in its second save (step 4), so that step 2 exists; each later
  // round resumes and is killed in the first save it makes, at the next stage ("atomic_file.
  // write:3" lands inside the model's safetensors write). Only the kills after the rename make
  // progress; the others must leave everything as it was.
  const char* points[] = {"checkpoint.manifest:2", "checkpoint.begin",    "atomic_file.write:3",
                          "checkpoint.model",      "checkpoint.shard",    "checkpoint.index",
                          "checkpoint.state",      "checkpoint.manifest", "checkpoint.renamed",
                          "checkpoint.prune"};
  int kills = 0;
  for (const char* point : points) {
    const std::string log = run + "/round.log";
    pid_t pid = start_train(train_args(run, steps), log, std::string("TANDEM_FAULT=") + point);
    const int code = wait_exit_code(pid);
    if (code == 0) break;  // the run finished before reaching another save
    EXPECT_EQ(code, 128 + SIGKILL) << point << "\n" << read_file(log);
    ++kills;
    expect_checkpoints_intact(run);
  }
  EXPECT_EQ(kills, static_cast<int>(std::size(points))) << "the run finished before every stage";
  auto done = run_tandem("train " + train_args(run, steps));
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("resumed from"), std::string::npos) << done.output;
  expect_bit_identical(reference, run, steps);
  expect_checkpoints_intact(run);
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos)
        << "a killed save's temporary was not cleaned: " << e.path();
}

TEST(FaultMatrix, KillNineAtRandomMomentsThenResumeIsBitIdentical) {
  const int steps = 12;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir("fault_kill_random");
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 4; ++round) {
    pid_t pid = start_train(train_args(run, steps), run + "/round.log");
    // A random step, then a random number of microseconds into it: anywhere in a step, an
    // evaluation or a save.
    // (When the run ended first, wait_for_steps has reaped it: its pid must not be signalled.)
    if (!wait_for_steps(pid, run, 1 + rng() % (steps - 2))) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  auto done = run_tandem("train " + train_args(run, steps));
  ASSERT_EQ(done.exit_code, 0) << done.output;
  expect_bit_identical(reference, run, steps);
  expect_checkpoints_intact(run);
}

// A tmpfs too small for a second checkpoint, mounted in a private mount namespace (unshare -m);
// skipped where this process may not mount one.
TEST(FaultMatrix, DiskFullDuringASaveKeepsThePreviousCheckpoint) {
  const int steps = 6;
  const std::string reference = reference_run(steps);
  const std::string probe = temp_dir("fault_disk_probe");
  auto can = run_shell("unshare -m sh -c 'mount -t tmpfs -o size=64k tandem_probe " + probe +
                       " && echo mounted'");
  if (can.output.find("mounted") == std::string::npos)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs unshare -m and mount): " << can.output;
  // Room for the resolved config, metrics and one checkpoint and a half: the save at step 4
  // needs the step-2 checkpoint plus a complete second one.
  std::uintmax_t checkpoint_bytes = 0;
  for (const auto& e :
       fs::recursive_directory_iterator(reference + "/checkpoints/" + checkpoint_dir_name(steps)))
    if (e.is_regular_file()) checkpoint_bytes += e.file_size();
  const std::uintmax_t size_kb = (checkpoint_bytes * 3 / 2) / 1024 + 64;
  const std::string mnt = temp_dir("fault_disk_mnt");
  const std::string out = temp_dir("fault_disk_out");
  auto r = run_shell("unshare -m sh -c 'mount -t tmpfs -o size=" + std::to_string(size_kb) +
                     "k tandem_full " + mnt + " && " + TANDEM_BINARY + " train " +
                     train_args(mnt + "/run", steps) + "; echo exit=$?; cp -a " + mnt + "/run/. " +
                     out + "/'");
  EXPECT_NE(r.output.find("exit=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("earlier checkpoints are untouched"), std::string::npos) << r.output;
  auto cps = list_checkpoints(out + "/checkpoints");
  ASSERT_FALSE(cps.empty()) << r.output;
  EXPECT_EQ(fs::path(cps.back()).filename(), checkpoint_dir_name(2)) << r.output;
  expect_checkpoints_intact(out);
  // With room again, the run resumes from step 2 and ends as if nothing happened.
  auto done = run_tandem("train " + train_args(out, steps));
  ASSERT_EQ(done.exit_code, 0) << done.output;
  expect_bit_identical(reference, out, steps);
}

struct Damage {
  const char* part;  // path inside the checkpoint; "" for the directory itself
  const char* how;   // flip, truncate, delete, garbage
};

TEST(FaultMatrix, EachDamagedPartIsNamedAndThePreviousCheckpointUsed) {
  const int steps = 6;
  const std::string reference = reference_run(steps);
  const std::string base = temp_dir("fault_damage_base");
  auto first = run_tandem("train " + train_args(base, 4));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string shard = "optim/" + optimizer_shard_file_name(0, 1);
  const Damage damages[] = {
      {"model/model.safetensors", "flip"},
      {"model/model.safetensors", "truncate"},
      {"model/model.yaml", "flip"},
      {"model/model.yaml", "delete"},
      {shard.c_str(), "flip"},
      {shard.c_str(), "truncate"},
      {"optim/index.json", "flip"},
      {"state.json", "flip"},
      {"state.json", "delete"},
      {"manifest.json", "garbage"},
      {"manifest.json", "delete"},
      {"model", "delete"},
  };
  int survived = 0;
  for (const Damage& d : damages) {
    SCOPED_TRACE(std::string(d.part) + " " + d.how);
    const std::string run = temp_dir("fault_damage");
    fs::copy(base, run, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    const std::string target = run + "/checkpoints/" + checkpoint_dir_name(4) + "/" + d.part;
    const std::string how = d.how;
    if (how == "flip") flip_byte(target);
    if (how == "truncate") fs::resize_file(target, fs::file_size(target) / 2);
    if (how == "delete") fs::remove_all(target);
    if (how == "garbage") std::ofstream(target, std::ios::trunc) << "{\"files\": [1, 2";
    auto r = run_tandem("train " + train_args(run, steps));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The message names the damaged checkpoint and the file (or the missing manifest).
    EXPECT_NE(r.output.find("skipping damaged checkpoint"), std::string::npos) << r.output;
    const std::string named = how == "delete" && std::string(d.part) == "model"
                                  ? std::string("model/")
                                  : std::string(d.part);
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("resumed from " + run + "/checkpoints/" + checkpoint_dir_name(2)),
              std::string::npos)
        << r.output;
    expect_bit_identical(reference, run, steps);
    survived += !::testing::Test::HasFailure();
  }
  EXPECT_EQ(survived, static_cast<int>(std::size(damages)));
}

// A stray step-000099 (no manifest, someone's notes) must not count as a checkpoint: with
// keep_last=1 it used to make each save delete every good checkpoint.
TEST(FaultMatrix, StrayStepFolderCannotPushGoodCheckpointsOut) {
  const int steps = 6;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir("fault_stray");
  const std::string cps = run + "/checkpoints";
  fs::create_directories(cps + "/step-000099");
  std::ofstream(cps + "/step-000099/notes.txt") << "not a checkpoint\n";
  auto r = run_tandem("train " + train_args(run, steps) + " trainer.keep_last=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto latest = latest_valid_checkpoint(cps, nullptr);
  ASSERT_TRUE(latest.has_value()) << r.output;
  EXPECT_EQ(fs::path(*latest).filename(), checkpoint_dir_name(steps)) << r.output;
  EXPECT_FALSE(fs::exists(cps + "/" + checkpoint_dir_name(2)));  // superseded: pruned
  EXPECT_TRUE(fs::exists(cps + "/step-000099/notes.txt"));
  // A resume past it continues from the run's own newest checkpoint.
  auto again = run_tandem("train " + train_args(run, steps + 2) + " trainer.keep_last=1");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("skipping damaged checkpoint"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("resumed from " + cps + "/" + checkpoint_dir_name(steps)),
            std::string::npos)
      << again.output;
  EXPECT_TRUE(fs::exists(cps + "/step-000099/notes.txt"));
  auto a = testing::read_metrics(reference + "/metrics.jsonl");
  auto b = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_GE(b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["train/loss"], b[i]["train/loss"]);
}

// Other folders beside the checkpoints: a step number past 64 bits (std::stoll used to escape
// as "unexpected error: stoll"), an odd name, a symbolic link out (never followed or deleted).
TEST(FaultMatrix, OddFoldersBesideTheCheckpointsAreLeftAlone) {
  const std::string run = temp_dir("fault_odd_folders");
  const std::string cps = run + "/checkpoints";
  fs::create_directories(cps + "/step-99999999999999999999");
  fs::create_directories(cps + "/step-000077.partial.old");
  const std::string outside = temp_dir("fault_odd_outside");
  std::ofstream(outside + "/precious.txt") << "keep me\n";
  fs::create_directory_symlink(outside, cps + "/step-000050");
  auto r = run_tandem("train " + train_args(run, 4) + " trainer.keep_last=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(cps + "/" + checkpoint_dir_name(4)));
  EXPECT_TRUE(fs::exists(cps + "/step-99999999999999999999"));
  EXPECT_TRUE(fs::exists(cps + "/step-000077.partial.old"));
  EXPECT_TRUE(fs::is_symlink(cps + "/step-000050"));
  EXPECT_TRUE(fs::exists(outside + "/precious.txt"));
}

// Every checkpoint fails: the run stops, says so, and changes nothing; metrics are never
// discarded. Only trainer.fresh_start=true starts again, moving the old run aside.
TEST(FaultMatrix, AllCheckpointsDamagedStopsUnlessAFreshStartIsAsked) {
  const int steps = 4;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir("fault_all_damaged");
  ASSERT_EQ(run_tandem("train " + train_args(run, steps)).exit_code, 0);
  for (const auto& cp : list_checkpoints(run + "/checkpoints"))
    flip_byte(cp + "/model/model.safetensors");
  const std::string metrics_before = read_file(run + "/metrics.jsonl");
  const std::string damaged_before =
      read_file(run + "/checkpoints/" + checkpoint_dir_name(4) + "/model/model.safetensors");

  auto r = run_tandem("train " + train_args(run, steps + 2));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("none of its 2 checkpoint(s) verifies"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fails its checksum"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trainer.fresh_start=true"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics_before);
  EXPECT_EQ(list_checkpoints(run + "/checkpoints").size(), 2u);
  EXPECT_EQ(read_file(run + "/checkpoints/" + checkpoint_dir_name(4) + "/model/model.safetensors"),
            damaged_before);

  auto fresh = run_tandem("train " + train_args(run, steps) + " trainer.fresh_start=true");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("previous-1"), std::string::npos) << fresh.output;
  EXPECT_EQ(read_file(run + "/previous-1/metrics.jsonl"), metrics_before);
  EXPECT_EQ(read_file(run + "/previous-1/checkpoints/" + checkpoint_dir_name(4) +
                      "/model/model.safetensors"),
            damaged_before);
  expect_bit_identical(reference, run, steps);
}

}  // namespace
}  // namespace tandem
