// End to end: a run trained on data with deliberately repeated instances (the signature of the
// double-sharding bug) gets the repeated-data alarm in its report; the same run on clean data does
// not. Reference: a clean run with another data seed. Real `tandem train`, `data audit` and
// `compare` on the small curve-parity config.
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"

namespace tandem {
namespace {

using testing::fixture;
using testing::run_shell;
using testing::run_tandem;

std::string train_args(const std::string& run, const std::string& extra) {
  return "train " + fixture("train/parity.yaml") +
         " trainer.init_from=" + fixture("train/init_hf") + " trainer.save_folder=" + run +
         " trainer.max_steps=40 trainer.progress=false evaluation.interval=5 " + extra;
}

// 21,100 tokens made of the first 8 instances (8 x 64 tokens) of train_a.npy, over and over.
std::string write_repeated_data(const std::string& dir) {
  std::string raw = core::read_file(fixture("train/train_a.npy"));
  const std::size_t unit = 8 * 64 * sizeof(std::uint16_t);
  std::string out;
  while (out.size() < 21100 * sizeof(std::uint16_t)) out += raw.substr(0, unit);
  const std::string path = dir + "/repeated.npy";
  core::write_file_atomic(path, out);
  return path;
}

TEST(RepeatedDataAlarm, RepeatedRunAlarmsCleanRunDoesNot) {
  const std::string root = testing::temp_dir("repeated_alarm");
  const std::string repeated = write_repeated_data(root);
  const std::string data_override = "'data.paths=[" + repeated + "]'";

  ASSERT_EQ(run_tandem(train_args(root + "/reference", "data.seed=7")).exit_code, 0);
  ASSERT_EQ(run_tandem(train_args(root + "/clean", "")).exit_code, 0);
  auto rep = run_tandem(train_args(root + "/repeated", data_override));
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  auto audit = run_shell(std::string(TANDEM_BINARY) + " data audit " +
                         fixture("train/parity.yaml") + " " + data_override +
                         " --world-sizes 1,2 --epochs 1 --json > " + root + "/repeated/audit.json");
  ASSERT_EQ(audit.exit_code, 0) << audit.output;

  auto bad = run_tandem("compare " + root + "/repeated " + root + "/reference --out " + root +
                        "/report-repeated --no-plots");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  std::string bad_summary = core::read_file(root + "/report-repeated/summary.md");
  EXPECT_NE(bad_summary.find("**ALARM**"), std::string::npos) << bad_summary;
  EXPECT_NE(bad_summary.find("duplicate"), std::string::npos) << bad_summary;

  auto good = run_tandem("compare " + root + "/clean " + root + "/reference --out " + root +
                         "/report-clean --no-plots");
  std::string good_summary = core::read_file(root + "/report-clean/summary.md");
  EXPECT_EQ(good_summary.find("**ALARM**"), std::string::npos) << good_summary;
  EXPECT_EQ(good.exit_code, 0) << good.output << good_summary;
}

}  // namespace
}  // namespace tandem
