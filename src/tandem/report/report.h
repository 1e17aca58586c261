// The comparison report: <out>/summary.md (pass/fail table, repeated-data alarm, audit counts),
// <out>/comparison.json (every matching point), <out>/plot_data.json and PNG plots drawn by
// tools/plot_report.py with matplotlib (training loss, each held-out loss, each downstream
// metric and the learning rate against tokens, run and reference overlaid).
//
// The plot script is found at $TANDEM_PLOT_SCRIPT, else <dir of the tandem binary>/../tools/
// plot_report.py (a build folder inside the repository), else <cwd>/tools/plot_report.py. The
// interpreter: $TANDEM_PYTHON, else /usr/bin/python3, else python3 on PATH; the first that can
// import matplotlib.
#pragma once

#include <string>

#include "tandem/report/compare.h"
#include "tandem/report/curves.h"
#include "tandem/report/repeated_data_alarm.h"

namespace tandem::report {

struct ReportOptions {
  std::string run_label = "run";
  std::string reference_label = "reference";
  bool plots = true;        // false: Markdown and JSON only
  std::string plot_script;  // empty: searched as above
};

// Writes the report; returns the list of PNG files written. Throws Error if plots were asked
// for and no interpreter with matplotlib (or no plot script) is found.
std::vector<std::string> write_report(const std::string& out_dir, const Curves& run,
                                      const Curves& reference, const Comparison& comparison,
                                      const AlarmResult& alarm, const ReportOptions& options);

std::string find_plot_script(const std::string& hint);
std::string find_python_with_matplotlib();

}  // namespace tandem::report
