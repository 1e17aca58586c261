// Curve loading, alignment by tokens, tolerances, the repeated-data alarm on synthetic metrics,
// and the `tandem compare` / `tandem eval` commands end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/report/compare.h"
#include "tandem/report/repeated_data_alarm.h"
#include "tandem/report/report.h"

namespace tandem::report {
namespace {

// A synthetic run: train loss decays; held-out follows it (+0.05) unless `repeated`, where the
// training loss keeps falling (memorisation) while held-out flattens and rises.
std::string write_run(const std::string& dir, bool repeated, double acc_offset = 0.0) {
  std::string text;
  for (int step = 1; step <= 40; ++step) {
    double tokens = step * 1000.0;
    double clean = 3.0 + 4.0 * std::exp(-step / 10.0);
    double train = clean - (repeated ? 0.02 * std::max(0, step - 10) : 0.0);
    nlohmann::json j{{"step", step},
                     {"tokens", tokens},
                     {"train/loss", train},
                     {"lr", 1e-3 * (1 - step / 41.0)},
                     {"note", "extra keys are ignored"}};
    if (step % 5 == 0) {
      double heldout = clean + 0.05 + (repeated ? 0.01 * std::max(0, step - 20) : 0.0);
      j["eval/val/loss"] = heldout;
      j["eval/val/ppl"] = std::exp(heldout);
      j["downstream/arc_easy:rc/acc"] = 0.25 + 0.005 * step + acc_offset;
    }
    text += j.dump() + "\n";
  }
  testing::write_text(dir + "/metrics.jsonl", text);
  return dir;
}

TEST(Curves, InterpolatesByTokens) {
  std::vector<Point> c = {{0, 1.0}, {10, 2.0}, {20, 4.0}};
  double v = 0;
  ASSERT_TRUE(interpolate(c, 15, v));
  EXPECT_DOUBLE_EQ(v, 3.0);
  ASSERT_TRUE(interpolate(c, 10, v));
  EXPECT_DOUBLE_EQ(v, 2.0);
  EXPECT_FALSE(interpolate(c, 21, v));
}

TEST(Compare, IdenticalRunsPassAndShiftedDownstreamFails) {
  std::string dir = testing::temp_dir("cmp");
  Curves a = load_curves(write_run(dir + "/a", false));
  Curves b = load_curves(write_run(dir + "/b", false));
  Curves c = load_curves(write_run(dir + "/c", false, 0.006));
  auto same = compare_curves(a, b, Tolerances::defaults());
  EXPECT_TRUE(same.pass());
  auto shifted = compare_curves(c, b, Tolerances::defaults());
  EXPECT_FALSE(shifted.pass());
  for (const auto& m : shifted.metrics) {
    if (m.metric == "downstream/arc_easy:rc/acc") {
      EXPECT_FALSE(m.pass());
      EXPECT_NEAR(m.max_abs_diff, 0.006, 1e-12);
    } else {
      EXPECT_TRUE(m.pass()) << m.metric;
    }
  }
  // A looser tolerance from a file passes; a glob and an exact name.
  testing::write_text(dir + "/tol.yaml",
                      "tolerances:\n  \"downstream/*\": 0.01\n  train/loss: 0.001\n  lr: null\n");
  Tolerances tol = Tolerances::from_file(dir + "/tol.yaml");
  EXPECT_EQ(tol.for_metric("train/loss"), 0.001);
  EXPECT_EQ(tol.for_metric("eval/val/loss"), 0.005);
  EXPECT_FALSE(tol.for_metric("lr").has_value());
  EXPECT_TRUE(compare_curves(c, b, tol).pass());
  std::filesystem::remove_all(dir);
}

TEST(Compare, ReferenceCsvAndUnknownColumns) {
  std::string dir = testing::temp_dir("csv");
  testing::write_text(dir + "/ref.csv",
                      "step,tokens,train/loss,downstream/piqa:rc/acc_per_char\n"
                      "1,1000,5.0,\n2,2000,4.0,0.6\n");
  Curves c = load_curves(dir + "/ref.csv");
  EXPECT_EQ(c.metrics.at("train/loss").size(), 2u);
  EXPECT_EQ(c.metrics.at("downstream/piqa:rc/acc_per_char").size(), 1u);
  testing::write_text(dir + "/bad.csv", "step,tokens,train/los\n1,1000,5.0\n");
  try {
    load_curves(dir + "/bad.csv");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown column \"train/los\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bad.csv"), std::string::npos);
  }
  testing::write_text(dir + "/bad.jsonl", R"({"tokens": 1, "train/loss": 2, "acc": 0.5})"
                                          "\n");
  EXPECT_THROW(load_curves(dir + "/bad.jsonl"), core::Error);
  testing::write_text(dir + "/notokens.csv", "step,train/loss\n1,5.0\n");
  EXPECT_THROW(load_curves(dir + "/notokens.csv"), core::Error);
  testing::write_text(dir + "/nan.csv", "tokens,train/loss\n1,abc\n");
  EXPECT_THROW(load_curves(dir + "/nan.csv"), core::Error);
  EXPECT_THROW(load_curves(dir + "/missing.csv"), core::Error);
  std::filesystem::remove_all(dir);
}

TEST(RepeatedDataAlarm, CleanRunIsClearRepeatedRunAlarms) {
  std::string dir = testing::temp_dir("alarm");
  Curves clean = load_curves(write_run(dir + "/clean", false));
  Curves clean2 = load_curves(write_run(dir + "/clean2", false));
  Curves repeated = load_curves(write_run(dir + "/repeated", true));
  AlarmOptions opt;
  // Against its own trend (no reference).
  EXPECT_FALSE(check_repeated_data(clean, nullptr, opt).triggered);
  auto self = check_repeated_data(repeated, nullptr, opt);
  EXPECT_TRUE(self.triggered);
  EXPECT_EQ(self.findings.front().basis, "self");
  // Against a clean reference.
  EXPECT_FALSE(check_repeated_data(clean, &clean2, opt).triggered);
  auto ref = check_repeated_data(repeated, &clean, opt);
  EXPECT_TRUE(ref.triggered);
  EXPECT_EQ(ref.findings.front().basis, "reference");
  // Audit counts are attached when audit.json is present.
  testing::write_text(dir + "/repeated/audit.json",
                      R"({"duplicate_groups": 3, "duplicate_instances": 7, "ok": true})");
  attach_audit_counts(dir + "/repeated", ref);
  EXPECT_EQ(ref.duplicate_groups, 3u);
  EXPECT_EQ(ref.duplicate_instances, 7u);
  // The nested form `tandem data audit --json` prints.
  testing::write_text(dir + "/repeated/audit.json",
                      R"({"duplicates": {"groups": 8, "instances": 321, "examples": []}})");
  attach_audit_counts(dir + "/repeated", ref);
  EXPECT_EQ(ref.duplicate_groups, 8u);
  EXPECT_EQ(ref.duplicate_instances, 321u);
  std::filesystem::remove_all(dir);
}

int run_cli(const std::string& args, std::string* out = nullptr) {
  std::string log = testing::temp_dir("cli_out") + "/out.txt";
  int rc = std::system((std::string(TANDEM_BINARY) + " " + args + " > " + log + " 2>&1").c_str());
  if (out) *out = core::read_file(log);
  return WEXITSTATUS(rc);
}

TEST(CompareCommand, ReportWithPlotsAndExitCodes) {
  std::string dir = testing::temp_dir("cmd");
  write_run(dir + "/clean", false);
  write_run(dir + "/clean2", false);
  write_run(dir + "/repeated", true);
  testing::write_text(dir + "/repeated/audit.json",
                      R"({"duplicate_groups": 2, "duplicate_instances": 5})");
  bool plots = true;
  try {
    find_python_with_matplotlib();
  } catch (const core::Error&) {
    plots = false;  // still checks the Markdown/JSON report
  }
  std::string flag = plots ? "" : " --no-plots";
  std::string out;
  EXPECT_EQ(
      run_cli("compare " + dir + "/clean " + dir + "/clean2 --out " + dir + "/r1" + flag, &out), 0)
      << out;
  std::string md = core::read_file(dir + "/r1/summary.md");
  EXPECT_NE(md.find("# Run comparison: PASS"), std::string::npos);
  std::string html = core::read_file(dir + "/r1/report.html");
  EXPECT_NE(html.find("Run comparison: <span class=\"pass\">PASS</span>"), std::string::npos);
  EXPECT_NE(html.find("eval/val/loss"), std::string::npos);
  EXPECT_EQ(html.find("data:image/png;base64,") != std::string::npos, plots);
  EXPECT_NE(md.find("Repeated-data alarm: clear"), std::string::npos);
  if (plots) {
    // One figure per group of metrics, embedded in the one-page report.
    for (const char* png :
         {"figure-training.png", "figure-held-out-loss.png", "figure-downstream-acc.png"}) {
      std::string path = dir + "/r1/" + png;
      ASSERT_TRUE(std::filesystem::exists(path)) << path;
      EXPECT_EQ(core::read_file(path).substr(1, 3), "PNG");
    }
  }
  EXPECT_EQ(
      run_cli("compare " + dir + "/repeated " + dir + "/clean --out " + dir + "/r2" + flag, &out),
      1)
      << out;
  md = core::read_file(dir + "/r2/summary.md");
  EXPECT_NE(md.find("**ALARM**"), std::string::npos);
  EXPECT_NE(md.find("2 duplicate groups, 5 duplicate instances"), std::string::npos);
  testing::write_text(dir + "/bad.csv", "tokens,train/loss,mystery\n1,2,3\n");
  EXPECT_NE(run_cli("compare " + dir + "/clean " + dir + "/bad.csv --out " + dir + "/r3", &out), 0);
  EXPECT_NE(out.find("unknown column \"mystery\""), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(EvalCommand, DownstreamOnFixtureModelAsJson) {
  std::string out;
  std::string f = testing::fixture("eval");
  ASSERT_EQ(run_cli("eval --checkpoint " + f + "/model --tokenizer " + f + "/tokenizer.json " +
                        "--tasks-dir " + f + "/oe_eval_tasks --tasks arc_easy:rc,piqa:bpb " +
                        "--max-length 256 --limit 3 --json",
                    &out),
            0)
      << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["downstream"]["arc_easy:rc"]["documents"], 3);
  EXPECT_EQ(j["downstream"]["arc_easy:rc"]["primary_metric"], "acc");
  EXPECT_TRUE(j["downstream"]["piqa:bpb"]["metrics"].contains("bpb"));
  EXPECT_NE(run_cli("eval --checkpoint " + f + "/model --tokenizer " + f + "/tokenizer.json " +
                        "--tasks-dir " + f + "/oe_eval_tasks --tasks nope:rc",
                    &out),
            0);
  EXPECT_NE(out.find("no task 'nope'"), std::string::npos) << out;
}

}  // namespace
}  // namespace tandem::report
