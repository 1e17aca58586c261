// Comparing a run's curves with a reference's, aligned by training tokens.
//
// Matching points: every point where the run measured a metric and whose tokens lie inside the
// reference's measured range for that metric; the reference value there is linearly
// interpolated in tokens (exact when the tokens coincide). diff = run - reference.
// Tolerances (absolute, |diff| <= tol at every matching point): defaults downstream/* 0.005 and
// eval/*/loss 0.005 (the +-0.005 the OLMo reproductions were held to); other metrics are shown
// but not checked unless a tolerance file names them. Tolerance file (YAML):
//   tolerances:
//     "downstream/*": 0.005
//     "train/loss": 0.05
//     "lr": null            # shown, not checked
// Patterns use shell globs; an exact name beats a pattern, a longer pattern beats a shorter one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tandem/report/curves.h"

namespace tandem::report {

struct Tolerances {
  std::map<std::string, std::optional<double>> by_pattern;
  static Tolerances defaults();
  static Tolerances from_file(const std::string& path);  // starts from the defaults
  std::optional<double> for_metric(const std::string& metric) const;
};

struct MetricComparison {
  std::string metric;
  std::optional<double> tolerance;
  std::vector<double> tokens, run, reference, diff;
  double max_abs_diff = 0.0;
  double worst_tokens = 0.0;
  bool checked() const { return tolerance.has_value() && !tokens.empty(); }
  bool pass() const { return !checked() || max_abs_diff <= *tolerance; }
};

struct Comparison {
  std::vector<MetricComparison> metrics;  // metrics present in both, sorted by name
  std::vector<std::string> only_in_run, only_in_reference;
  bool pass() const;
};

Comparison compare_curves(const Curves& run, const Curves& reference, const Tolerances& tol);

}  // namespace tandem::report
