#include "tandem/report/compare.h"

#include <fnmatch.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/io/config.h"

namespace tandem::report {

Tolerances Tolerances::defaults() {
  Tolerances t;
  t.by_pattern["downstream/*"] = 0.005;
  t.by_pattern["eval/*/loss"] = 0.005;
  return t;
}

Tolerances Tolerances::from_file(const std::string& path) {
  Tolerances t = defaults();
  YAML::Node root = io::load_yaml_file(path);
  TANDEM_CHECK(root.IsMap(), "{}: expected a mapping with key \"tolerances\"", path);
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();  // load_yaml_file: keys are scalars
    TANDEM_CHECK(key == "tolerances", "{}: unknown key \"{}\" (expected \"tolerances\")", path,
                 key);
  }
  YAML::Node tols = root["tolerances"];
  TANDEM_CHECK(tols && tols.IsMap(), "{}: \"tolerances\" must be a mapping", path);
  for (const auto& kv : tols) {
    std::string pattern = kv.first.Scalar();
    if (kv.second.IsNull()) {
      t.by_pattern[pattern] = std::nullopt;
      continue;
    }
    double v = 0;
    try {
      v = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      core::fail("{}: tolerances.{}: expected a number or null", path, pattern);
    }
    TANDEM_CHECK(v >= 0 && std::isfinite(v), "{}: tolerances.{}: must be >= 0", path, pattern);
    t.by_pattern[pattern] = v;
  }
  return t;
}

std::optional<double> Tolerances::for_metric(const std::string& metric) const {
  if (auto it = by_pattern.find(metric); it != by_pattern.end()) return it->second;
  const std::string* best = nullptr;
  for (const auto& [pattern, value] : by_pattern) {
    if (fnmatch(pattern.c_str(), metric.c_str(), 0) == 0 &&
        (!best || pattern.size() > best->size())) {
      best = &pattern;
    }
  }
  return best ? by_pattern.at(*best) : std::nullopt;
}

bool Comparison::pass() const {
  for (const auto& m : metrics) {
    if (!m.pass()) return false;
  }
  return true;
}

Comparison compare_curves(const Curves& run, const Curves& reference, const Tolerances& tol) {
  Comparison c;
  for (const auto& [name, points] : run.metrics) {
    auto ref = reference.metrics.find(name);
    if (ref == reference.metrics.end()) {
      c.only_in_run.push_back(name);
      continue;
    }
    MetricComparison m;
    m.metric = name;
    m.tolerance = tol.for_metric(name);
    for (const Point& p : points) {
      double r = 0;
      if (!interpolate(ref->second, p.tokens, r)) continue;
      double d = p.value - r;
      m.tokens.push_back(p.tokens);
      m.run.push_back(p.value);
      m.reference.push_back(r);
      m.diff.push_back(d);
      if (std::fabs(d) > m.max_abs_diff || m.tokens.size() == 1) {
        m.max_abs_diff = std::fabs(d);
        m.worst_tokens = p.tokens;
      }
    }
    c.metrics.push_back(std::move(m));
  }
  for (const auto& [name, points] : reference.metrics) {
    if (!run.metrics.contains(name)) c.only_in_reference.push_back(name);
  }
  return c;
}

}  // namespace tandem::report
