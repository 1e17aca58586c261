// Metric curves against training tokens, read from a run directory (<run>/metrics.jsonl) or a
// reference curve file (CSV with a header row, or JSONL with one object per line). Every row
// needs "tokens" (or "step" plus a tokens_per_step to convert); other columns must be known
// metric names: train/loss, train/z_loss, train/grad_norm, lr, tokens_per_s, mfu,
// skipped_steps, eval/<set>/loss, eval/<set>/ppl, downstream/<task>/<metric>. An unknown column
// in a reference file is an error naming the file and the column; a run's own metrics.jsonl may
// carry extra keys (ignored).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem::report {

struct Point {
  double tokens = 0.0;
  double value = 0.0;
};

struct Curves {
  std::string source;
  std::map<std::string, std::vector<Point>> metrics;  // sorted by tokens
  bool has(const std::string& m) const { return metrics.contains(m); }
};

bool is_known_metric(const std::string& name);

// A run directory (reads metrics.jsonl) or a .csv / .jsonl curve file.
Curves load_curves(const std::string& path);
Curves load_metrics_jsonl(const std::string& path, bool strict);
Curves load_metrics_csv(const std::string& path);

// Linear interpolation in tokens; nullopt-like: returns false outside [first, last].
bool interpolate(const std::vector<Point>& curve, double tokens, double& value);

}  // namespace tandem::report
