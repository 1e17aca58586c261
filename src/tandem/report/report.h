// The comparison report, one page a person reads:
//   <out>/report.html    verdicts (pass/fail per metric), the repeated-data alarm with its numbers,
//                        audit counts, and one figure per group of metrics with every curve of
//                        the run against its reference and each panel's verdict; the figures are
//                        embedded, so the page is one self-contained file
//   <out>/summary.md     the same in Markdown, the figures beside it (<out>/figure-<group>.png)
//   <out>/comparison.json  every matching point and the alarm's per-point numbers
//   <out>/plot_data.json   what the figures show (tools/plot_report.py draws them)
// Groups: training (loss, z-loss, grad norm, learning rate), throughput and stability, held-out
// loss (one panel per set), and downstream metrics by metric name (one panel per task); any
// other metric goes to "other".
//
// The plot script is found at $TANDEM_PLOT_SCRIPT, else <dir of the tandem binary>/../tools/
// plot_report.py (a build folder inside the repository), else <cwd>/tools/plot_report.py. The
// interpreter: $TANDEM_PYTHON, else /usr/bin/python3, else python3 on PATH; the first that can
// import matplotlib.
#pragma once

#include <string>
#include <vector>

#include "tandem/report/compare.h"
#include "tandem/report/curves.h"
#include "tandem/report/repeated_data_alarm.h"

namespace tandem::report {

struct ReportOptions {
  std::string run_label = "run";
  std::string reference_label = "reference";
  bool plots = true;        // false: the page and Markdown without figures
  std::string plot_script;  // empty: searched as above
};

// One figure: a group of metrics drawn side by side.
struct FigureGroup {
  std::string title;
  std::string file;  // figure-<slug>.png
  std::vector<std::string> metrics;
};
// The groups for the metrics present in either curve set, in page order.
std::vector<FigureGroup> figure_groups(const Curves& run, const Curves& reference);

// Writes the report; returns the figure files written. Throws Error if plots were asked for and
// no interpreter with matplotlib (or no plot script) is found.
std::vector<std::string> write_report(const std::string& out_dir, const Curves& run,
                                      const Curves& reference, const Comparison& comparison,
                                      const AlarmResult& alarm, const ReportOptions& options);

std::string find_plot_script(const std::string& hint);
std::string find_python_with_matplotlib();

}  // namespace tandem::report
