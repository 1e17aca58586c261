// `tandem compare RUN REFERENCE --out DIR [--tolerances FILE.yaml]`: aligns a run with a
// reference run or curve file by tokens, checks the differences against tolerances, runs the
// repeated-data alarm and writes a report (one HTML page with the verdicts and one figure per
// group of metrics; the same in Markdown; JSON). Exit 1 on a breach or an alarm.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/report/compare.h"
#include "tandem/report/curves.h"
#include "tandem/report/repeated_data_alarm.h"
#include "tandem/report/report.h"

namespace tandem::cli {
namespace {

struct CompareArgs {
  std::string run;
  std::string reference;
  std::string out;
  std::string tolerances;
  double alarm_threshold = 0.1;
  double alarm_alpha = 0.01;
  bool no_plots = false;
};

int run_compare(const CompareArgs& args) {
  namespace fs = std::filesystem;
  TANDEM_CHECK(fs::is_directory(args.run), "{}: not a run directory", args.run);
  report::Curves run = report::load_curves(args.run);
  report::Curves reference = report::load_curves(args.reference);
  report::Tolerances tol = args.tolerances.empty() ? report::Tolerances::defaults()
                                                   : report::Tolerances::from_file(args.tolerances);
  report::Comparison comparison = report::compare_curves(run, reference, tol);
  report::AlarmOptions alarm_options;
  alarm_options.threshold = args.alarm_threshold;
  alarm_options.alpha = args.alarm_alpha;
  report::AlarmResult alarm = report::check_repeated_data(run, &reference, alarm_options);
  report::attach_audit_counts(args.run, alarm);

  report::ReportOptions options;
  options.run_label = fs::path(args.run).filename().string();
  options.reference_label = fs::path(args.reference).filename().string();
  if (options.run_label.empty()) options.run_label = "run";
  if (options.reference_label.empty() || options.reference_label == options.run_label) {
    options.reference_label = "reference";
  }
  options.plots = !args.no_plots;
  auto figures = report::write_report(args.out, run, reference, comparison, alarm, options);

  for (const auto& m : comparison.metrics) {
    if (!m.checked()) continue;
    std::cout << fmt::format("{:<40} {:>4} points  max |diff| {:.5f}  tol {:g}  {}\n", m.metric,
                             m.tokens.size(), m.max_abs_diff, *m.tolerance,
                             m.pass() ? "pass" : "FAIL");
  }
  std::cout << fmt::format("repeated-data alarm: {}\n", alarm.triggered ? "ALARM" : "clear");
  std::cout << fmt::format("report: {}/report.html ({} figures; summary.md beside it)\n", args.out,
                           figures.size());
  bool ok = comparison.pass() && !alarm.triggered;
  std::cout << (ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}

}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare a run with a reference run or curve file; write a report with plots");
  cmd->add_option("run", args->run, "run directory (metrics.jsonl, audit.json)")->required();
  cmd->add_option("reference", args->reference,
                  "reference run directory, or a curve file (.csv or .jsonl)")
      ->required();
  cmd->add_option("--out", args->out, "report directory")->required();
  cmd->add_option("--tolerances", args->tolerances, "YAML file: tolerances: {metric-glob: tol}");
  cmd->add_option("--alarm-threshold", args->alarm_threshold,
                  "repeated-data alarm: nats beyond the noise allowance (default 0.1)");
  cmd->add_option("--alarm-alpha", args->alarm_alpha,
                  "repeated-data alarm: false-alarm probability over all points (default 0.01)");
  cmd->add_flag("--no-plots", args->no_plots, "skip the figures");
  cmd->callback([args, &exit_code] { exit_code = run_compare(*args); });
}

}  // namespace tandem::cli
