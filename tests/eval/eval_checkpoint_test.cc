// `tandem eval --checkpoint` evaluates a trainer checkpoint only when it verifies: a checkpoint
// failing its checksum is an error naming the file, and a run directory means its newest
// checkpoint that verifies (a damaged newer one is named and skipped).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"

namespace tandem {
namespace {

using namespace core;

namespace fs = std::filesystem;

TEST(EvalCheckpoint, ChecksumFailureIsAnErrorAndARunDirUsesTheNewestValid) {
  const std::string config = testing::fixture("train/parity.yaml");
  const std::string run = testing::temp_dir("eval_damaged_checkpoint");
  auto train = testing::run_tandem("train " + config +
                                   " trainer.init_from=" + testing::fixture("train/init_hf") +
                                   " trainer.save_folder=" + run +
                                   " trainer.max_steps=4 trainer.save_interval=2 "
                                   "trainer.progress=false trainer.peak_tflops=0.001"
                                   " evaluation.interval=0");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string weights = run + "/checkpoints/step-000004/model/model.safetensors";
  std::string bytes = read_file(weights);
  bytes[bytes.size() - 5] ^= 0x40;  // one weight changed: the file still parses
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << bytes;

  auto bad = testing::run_tandem("eval " + config + " --checkpoint " + run +
                                 "/checkpoints/step-000004 --json");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("step-000004/model/model.safetensors fails its checksum"),
            std::string::npos)
      << bad.output;

  auto newest = testing::run_tandem("eval " + config + " --checkpoint " + run + " --json");
  ASSERT_EQ(newest.exit_code, 0) << newest.output;
  EXPECT_NE(newest.output.find("skipping damaged checkpoint"), std::string::npos) << newest.output;
  EXPECT_NE(newest.output.find("step-000002/model"), std::string::npos) << newest.output;
}

}  // namespace
}  // namespace tandem
