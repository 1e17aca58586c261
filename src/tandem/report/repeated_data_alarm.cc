#include "tandem/report/repeated_data_alarm.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::report {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

double normal_quantile_upper(double p) {
  TANDEM_CHECK(p > 0 && p < 1, "normal quantile: p = {} outside (0, 1)", p);
  double lo = -40.0, hi = 40.0;  // P(Z > z) = erfc(z / sqrt 2) / 2, decreasing in z
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

double curve_noise(const std::vector<Point>& c) {
  if (c.size() < 5) return std::numeric_limits<double>::quiet_NaN();
  // Second differences, each scaled to unit variance for white noise of unit sigma (uneven
  // spacing: e = (x2 - x1) - r (x1 - x0), r = dt2 / dt1, variance 1 + (1 + r)^2 + r^2).
  std::vector<double> e;
  for (std::size_t i = 1; i + 1 < c.size(); ++i) {
    const double dt1 = c[i].tokens - c[i - 1].tokens, dt2 = c[i + 1].tokens - c[i].tokens;
    if (dt1 <= 0 || dt2 <= 0) continue;
    const double r = dt2 / dt1;
    const double d = (c[i + 1].value - c[i].value) - r * (c[i].value - c[i - 1].value);
    e.push_back(d / std::sqrt(1.0 + (1.0 + r) * (1.0 + r) + r * r));
  }
  if (e.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  const double m = median(e);
  for (double& x : e) x = std::fabs(x - m);
  return 1.4826 * median(e);  // MAD -> sigma of a normal
}

std::optional<LocalFit> local_linear_fit(const std::vector<Point>& c, double tokens, int window) {
  if (c.size() < 3 || tokens < c.front().tokens || tokens > c.back().tokens) return std::nullopt;
  // The `window` points nearest in tokens (a contiguous run of the sorted curve).
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(std::max(window, 3)), c.size());
  std::size_t lo = static_cast<std::size_t>(
      std::lower_bound(c.begin(), c.end(), tokens,
                       [](const Point& p, double t) { return p.tokens < t; }) -
      c.begin());
  std::size_t begin = lo > k / 2 ? lo - k / 2 : 0;
  begin = std::min(begin, c.size() - k);
  // Slide toward the nearer side while that brings closer points in.
  while (begin > 0 && tokens - c[begin - 1].tokens < c[begin + k - 1].tokens - tokens) --begin;
  while (begin + k < c.size() && c[begin + k].tokens - tokens < tokens - c[begin].tokens) ++begin;
  double mean_t = 0, mean_v = 0;
  for (std::size_t i = begin; i < begin + k; ++i) {
    mean_t += c[i].tokens;
    mean_v += c[i].value;
  }
  mean_t /= static_cast<double>(k);
  mean_v /= static_cast<double>(k);
  double stt = 0, stv = 0;
  for (std::size_t i = begin; i < begin + k; ++i) {
    stt += (c[i].tokens - mean_t) * (c[i].tokens - mean_t);
    stv += (c[i].tokens - mean_t) * (c[i].value - mean_v);
  }
  if (stt <= 0) return LocalFit{mean_v, 1.0 / std::sqrt(static_cast<double>(k))};
  const double slope = stv / stt;
  LocalFit f;
  f.value = mean_v + slope * (tokens - mean_t);
  f.se_factor =
      std::sqrt(1.0 / static_cast<double>(k) + (tokens - mean_t) * (tokens - mean_t) / stt);
  return f;
}

AlarmResult check_repeated_data(const Curves& run, const Curves* reference,
                                const AlarmOptions& options) {
  AlarmResult result;
  result.threshold = options.threshold;
  result.alpha = options.alpha;
  if (!run.has("train/loss")) {
    result.notes.push_back("the run has no train/loss: nothing to check");
    return result;
  }
  const auto& train = run.metrics.at("train/loss");
  const double sigma = curve_noise(train);
  if (!std::isfinite(sigma)) {
    result.notes.push_back("fewer than 5 training-loss points: their noise is unknown");
    return result;
  }
  const bool ref_train = reference && reference->has("train/loss");
  const double ref_sigma = ref_train ? curve_noise(reference->metrics.at("train/loss")) : 0.0;

  // First pass: every testable point, its gaps and noise; the count sets z.
  std::vector<AlarmCheck> checks;
  std::vector<std::vector<double>> ses;
  for (const auto& [name, heldout] : run.metrics) {
    if (!name.starts_with("eval/") || !name.ends_with("/loss")) continue;
    AlarmCheck check;
    check.heldout = name;
    check.sigma = sigma;
    std::vector<double> se;
    if (ref_train && reference->has(name) && std::isfinite(ref_sigma)) {
      check.basis = "reference";
      const auto& rt = reference->metrics.at("train/loss");
      const auto& rh = reference->metrics.at(name);
      for (const Point& p : heldout) {
        auto a = local_linear_fit(train, p.tokens, options.window);
        auto b = local_linear_fit(rt, p.tokens, options.window);
        double ref_heldout = 0;
        if (!a || !b || !interpolate(rh, p.tokens, ref_heldout)) continue;
        AlarmPoint q;
        q.tokens = p.tokens;
        q.train_gap = b->value - a->value;
        q.heldout_gap = ref_heldout - p.value;
        q.excess = q.train_gap - q.heldout_gap;
        check.points.push_back(q);
        se.push_back(std::hypot(sigma * a->se_factor, ref_sigma * b->se_factor));
      }
    } else {
      check.basis = "self";
      std::optional<LocalFit> base;
      Point base_point;
      for (const Point& p : heldout) {
        auto a = local_linear_fit(train, p.tokens, options.window);
        if (!a) continue;
        if (!base) {
          base = a;
          base_point = p;
          continue;
        }
        AlarmPoint q;
        q.tokens = p.tokens;
        q.train_gap = base->value - a->value;
        q.heldout_gap = base_point.value - p.value;
        q.excess = q.train_gap - q.heldout_gap;
        check.points.push_back(q);
        se.push_back(sigma * std::hypot(base->se_factor, a->se_factor));
      }
    }
    if (check.points.empty()) {
      result.notes.push_back(
          name + ": no " + check.basis + "-basis point with training loss around it (needs " +
          (check.basis == "self" ? "two evaluations" : "overlapping curves") + ")");
      continue;
    }
    result.tests += static_cast<std::int64_t>(check.points.size());
    checks.push_back(std::move(check));
    ses.push_back(std::move(se));
  }
  if (checks.empty()) {
    if (result.notes.empty())
      result.notes.push_back("the run has no eval/<set>/loss: nothing to check");
    return result;
  }
  result.z = normal_quantile_upper(options.alpha / static_cast<double>(result.tests));
  for (std::size_t c = 0; c < checks.size(); ++c) {
    for (std::size_t i = 0; i < checks[c].points.size(); ++i) {
      AlarmPoint& q = checks[c].points[i];
      q.allowance = options.threshold + result.z * ses[c][i];
      q.alarm = q.train_gap > q.allowance && q.excess > q.allowance;
      if (q.alarm) {
        result.findings.push_back({checks[c].heldout, checks[c].basis, q.tokens, q.train_gap,
                                   q.heldout_gap, q.allowance});
      }
    }
  }
  result.checks = std::move(checks);
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
    auto j = io::read_json_file(path);
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
