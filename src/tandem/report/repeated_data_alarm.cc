#include "tandem/report/repeated_data_alarm.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::report {
namespace {

// Mean of the last `k` points at or before `tokens`; false when there is none.
bool smoothed_at(const std::vector<Point>& curve, double tokens, int k, double& value) {
  auto end = std::upper_bound(curve.begin(), curve.end(), tokens,
                              [](double t, const Point& p) { return t < p.tokens; });
  auto n = std::min<std::ptrdiff_t>(k, end - curve.begin());
  if (n <= 0) return false;
  double sum = 0;
  for (auto it = end - n; it != end; ++it) sum += it->value;
  value = sum / static_cast<double>(n);
  return true;
}

}  // namespace

AlarmResult check_repeated_data(const Curves& run, const Curves* reference,
                                const AlarmOptions& options) {
  AlarmResult result;
  if (!run.has("train/loss")) {
    result.notes.push_back("the run has no train/loss: nothing to check");
    return result;
  }
  const auto& train = run.metrics.at("train/loss");
  bool any_heldout = false;
  for (const auto& [name, heldout] : run.metrics) {
    if (!name.starts_with("eval/") || !name.ends_with("/loss")) continue;
    any_heldout = true;
    bool with_ref = reference && reference->has("train/loss") && reference->has(name);
    if (with_ref) {
      const auto& ref_train = reference->metrics.at("train/loss");
      const auto& ref_heldout = reference->metrics.at(name);
      for (const Point& p : heldout) {
        double run_train = 0, ref_train_v = 0, ref_heldout_v = 0;
        if (!smoothed_at(train, p.tokens, options.smooth, run_train)) continue;
        // Both training curves smoothed the same way: noise must not read as a gap.
        if (!smoothed_at(ref_train, p.tokens, options.smooth, ref_train_v)) continue;
        if (!interpolate(ref_heldout, p.tokens, ref_heldout_v)) continue;
        double train_gap = ref_train_v - run_train;
        double heldout_gap = ref_heldout_v - p.value;
        if (train_gap > options.threshold && train_gap - heldout_gap > options.threshold) {
          result.findings.push_back({name, "reference", p.tokens, train_gap, heldout_gap});
        }
      }
      continue;
    }
    // Self basis: the gap between held-out and training loss.
    std::vector<std::pair<Point, double>> gaps;  // (held-out point, gap)
    for (const Point& p : heldout) {
      double t = 0;
      if (smoothed_at(train, p.tokens, options.smooth, t)) gaps.push_back({p, p.value - t});
    }
    if (gaps.size() < 2) {
      result.notes.push_back(name +
                             ": fewer than two held-out points with training loss before "
                             "them; cannot check against its own trend");
      continue;
    }
    double best = gaps[0].first.value;
    for (std::size_t i = 1; i < gaps.size(); ++i) {
      double widening = gaps[i].second - gaps[0].second;
      bool improving = gaps[i].first.value < best - options.min_improvement;
      if (widening > options.threshold && !improving) {
        result.findings.push_back(
            {name, "self", gaps[i].first.tokens, widening, best - gaps[i].first.value});
      }
      best = std::min(best, gaps[i].first.value);
    }
  }
  if (!any_heldout) result.notes.push_back("the run has no eval/<set>/loss: nothing to check");
  result.triggered = !result.findings.empty();
  return result;
}

void attach_audit_counts(const std::string& run_dir, AlarmResult& result) {
  std::string path = (std::filesystem::path(run_dir) / "audit.json").string();
  if (!std::filesystem::exists(path)) {
    result.notes.push_back("no audit.json in the run directory: duplicate counts unknown");
    return;
  }
  try {
    auto j = nlohmann::json::parse(core::read_file(path));
    // `tandem data audit --json` nests them under "duplicates"; AuditReport fields are flat.
    if (j.contains("duplicates") && j.at("duplicates").is_object()) {
      const auto& d = j.at("duplicates");
      if (d.contains("groups")) result.duplicate_groups = d.at("groups").get<std::uint64_t>();
      if (d.contains("instances")) {
        result.duplicate_instances = d.at("instances").get<std::uint64_t>();
      }
    }
    if (j.contains("duplicate_groups")) result.duplicate_groups = j.at("duplicate_groups");
    if (j.contains("duplicate_instances")) result.duplicate_instances = j.at("duplicate_instances");
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: cannot read the audit report ({})", path, e.what());
  }
}

}  // namespace tandem::report
