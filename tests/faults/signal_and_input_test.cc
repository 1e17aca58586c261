// The fault matrix, process half: SIGINT, SIGTERM, SIGHUP (a closed terminal) and SIGUSR1 (what
// mpirun passes on to its ranks, tests/faults/mpi_save_test.cc) each save a
// checkpoint at the next step boundary and stop; a token file shrunk or rewritten while the run
// reads it stops the run with a message naming it (it used to end in SIGBUS); each resumes
// bit-identically once the cause is gone.
#include <fmt/format.h>

#include <cstring>

#include "fault_test_util.h"
#include "tandem/train/stop_signals.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;
using namespace train;

using namespace fault_testing;

class StopSignal : public ::testing::TestWithParam<int> {};

TEST_P(StopSignal, SavesAtTheStepBoundaryStopsAndResumesBitIdentically) {
  const int sig = GetParam();
  const int steps = 40;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir("fault_signal_" + std::to_string(sig));
  const std::string log = run + "/signal.log";
  fs::create_directories(run);
  pid_t pid = start_train(train_args(run, steps) + " trainer.save_interval=1000", log);
  ASSERT_TRUE(wait_for_steps(pid, run, 3)) << read_file(log);
  ASSERT_EQ(kill(pid, sig), 0);
  EXPECT_EQ(wait_exit_code(pid), 128 + sig) << read_file(log);
  const std::string output = read_file(log);
  EXPECT_NE(output.find("signal " + std::to_string(sig) + " received"), std::string::npos)
      << output;
  // The checkpoint written on the signal is of the last step the log records.
  const std::size_t logged = metric_lines(run);
  ASSERT_LT(logged, static_cast<std::size_t>(steps)) << output;
  auto latest = latest_valid_checkpoint(run + "/checkpoints", nullptr);
  ASSERT_TRUE(latest.has_value()) << output;
  EXPECT_EQ(fs::path(*latest).filename(), checkpoint_dir_name(static_cast<std::int64_t>(logged)));
  auto done = run_tandem("train " + train_args(run, steps) + " trainer.save_interval=1000");
  ASSERT_EQ(done.exit_code, 0) << done.output;
  expect_bit_identical(reference, run, steps);
}

// The stop signals are blocked in every thread of a training process (one thread takes them with
// sigwait): a signal delivered to a computing thread writes its frame below the stack pointer,
// which oneDNN's JIT GEMM points into the heap, and corrupted the heap about one stop in a hundred.
TEST(FaultMatrix, StopSignalsAreBlockedInEveryThreadOfATrainingRun) {
  const std::string run = temp_dir("fault_signal_mask");
  const std::string log = run + "/signal.log";
  fs::create_directories(run);
  pid_t pid = start_train(train_args(run, 400) + " trainer.save_interval=1000", log);
  ASSERT_TRUE(wait_for_steps(pid, run, 3)) << read_file(log);
  constexpr unsigned long long kStopMask = (1ull << (SIGHUP - 1)) | (1ull << (SIGINT - 1)) |
                                           (1ull << (SIGTERM - 1)) | (1ull << (SIGUSR1 - 1));
  int computing = 0, signal_threads = 0;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    // The signal thread, inside sigwait, shows what it waits for as unblocked.
    if (read_file((task.path() / "comm").string()) == std::string(kSignalThreadName) + "\n") {
      ++signal_threads;
      continue;
    }
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      const unsigned long long blocked = std::stoull(line.substr(7), nullptr, 16);
      EXPECT_EQ(blocked & kStopMask, kStopMask)
          << "thread " << task.path().filename() << " can take a stop signal: " << line;
      ++computing;
    }
  }
  EXPECT_EQ(signal_threads, 1);
  EXPECT_GE(computing, 2);  // the main thread and the data loader's at least
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit_code(pid), 128 + SIGTERM) << read_file(log);
}

// A second, different stop signal before the first has been acted on ends the process at once,
// by that signal, without a checkpoint (the way out of a run stuck before its step boundary).
TEST(FaultMatrix, ASecondStopSignalEndsTheProcessAtOnce) {
  const std::string run = temp_dir("fault_signal_twice");
  const std::string log = run + "/signal.log";
  fs::create_directories(run);
  pid_t pid = start_train(train_args(run, 400) + " trainer.save_interval=1000", log);
  ASSERT_TRUE(wait_for_steps(pid, run, 3)) << read_file(log);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  ASSERT_EQ(kill(pid, SIGTERM), 0);  // another number: two of one kind could merge into one
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string output = read_file(log);
  ASSERT_TRUE(WIFSIGNALED(status)) << output;
  EXPECT_TRUE(WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT) << WTERMSIG(status);
  EXPECT_NE(output.find("second stop signal: stopping now, without a checkpoint"),
            std::string::npos)
      << output;
}

INSTANTIATE_TEST_SUITE_P(FaultMatrix, StopSignal,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP, SIGUSR1), [](const auto& info) {
                           return std::string("SIG") + sigabbrev_np(info.param);
                         });

// The training files copied to a folder of their own, so that a test can damage them.
std::string copy_training_data(const std::string& dir) {
  for (const char* f : {"train_a.npy", "train_b.npy", "train_c.npy", "heldout.npy"})
    fs::copy_file(fixture(std::string("train/") + f), dir + "/" + f);
  return " data.paths=[" + dir + "/train_a.npy," + dir + "/train_b.npy," + dir +
         "/train_c.npy] 'evaluation.sets=[{name: heldout, paths: [" + dir + "/heldout.npy]}]'";
}

void expect_input_change_stops_and_resumes(const std::string& name, bool shrink) {
  const int steps = 40;
  const std::string reference = reference_run(steps);
  const std::string run = temp_dir(name);
  const std::string data = temp_dir(name + "_data");
  const std::string args = train_args(run, steps) + copy_training_data(data);
  const std::string victim = data + "/train_b.npy";
  const std::string original = read_file(victim);
  pid_t pid = start_train(args, data + "/train.log");
  ASSERT_TRUE(wait_for_steps(pid, run, 3));
  if (shrink) {
    fs::resize_file(victim, original.size() / 3);  // truncated while mapped or read
  } else {
    std::string changed = original;  // same size, other tokens: rewritten in place
    for (std::size_t i = 0; i < changed.size(); i += 2) changed[i] = static_cast<char>(i);
    std::ofstream(victim, std::ios::binary | std::ios::in | std::ios::out) << changed;
  }
  const int code = wait_exit_code(pid);
  const std::string output = read_file(data + "/train.log");
  ASSERT_NE(code, 0) << "the run did not notice its input changing\n" << output;
  EXPECT_EQ(code, 1) << "not a clean error exit (SIGBUS is 135)\n" << output;
  EXPECT_NE(output.find(victim), std::string::npos) << output;
  EXPECT_NE(output.find("changed while it was being read"), std::string::npos) << output;
  expect_checkpoints_intact(run);
  // The file restored (a new modification time), the run resumes as if nothing happened.
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << original;
  auto done = run_tandem("train " + args);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  expect_bit_identical(reference, run, steps);
}

TEST(FaultMatrix, TokenFileTruncatedDuringTheRunIsAnErrorNotSigbus) {
  expect_input_change_stops_and_resumes("fault_input_shrunk", true);
}

TEST(FaultMatrix, TokenFileRewrittenDuringTheRunIsAnError) {
  expect_input_change_stops_and_resumes("fault_input_rewritten", false);
}

}  // namespace
}  // namespace tandem
