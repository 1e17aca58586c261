#include "tandem/report/curves.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::report {
namespace {

// What is_known_metric accepts, for the errors that name an unknown column.
constexpr const char* kKnownColumns =
    "step, tokens, train/loss, train/z_loss, train/grad_norm, lr, tokens_per_s, mfu, "
    "mfu_olmo_core, skipped_steps, nonfinite_steps, eval/<set>/loss|ppl, "
    "downstream/<task>/<metric>";

void add_row(Curves& curves, const std::map<std::string, double>& row, const std::string& where,
             bool strict) {
  auto tokens = row.find("tokens");
  TANDEM_CHECK(tokens != row.end(), "{}: no \"tokens\" value (curves are aligned by tokens)",
               where);
  for (const auto& [key, value] : row) {
    if (key == "tokens" || key == "step") continue;
    if (!is_known_metric(key)) {
      TANDEM_CHECK(!strict, "{}: unknown column \"{}\" (known: {})", where, key, kKnownColumns);
      continue;
    }
    curves.metrics[key].push_back({tokens->second, value});
  }
}

void sort_curves(Curves& curves) {
  for (auto& [name, points] : curves.metrics) {
    std::stable_sort(points.begin(), points.end(),
                     [](const Point& a, const Point& b) { return a.tokens < b.tokens; });
  }
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.push_back(cell);
      cell.clear();
    } else if (c != '\r') {
      cell.push_back(c);
    }
  }
  cells.push_back(cell);
  for (auto& s : cells) {
    auto b = s.find_first_not_of(" \t");
    auto e = s.find_last_not_of(" \t");
    s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  return cells;
}

}  // namespace

bool is_known_metric(const std::string& name) {
  static const std::regex pattern(
      R"(train/(loss|z_loss|grad_norm)|lr|tokens_per_s|mfu|mfu_olmo_core|skipped_steps|)"
      R"(nonfinite_steps|)"
      R"(eval/[^/]+/(loss|ppl)|downstream/[^/]+/[A-Za-z0-9_]+)");
  return std::regex_match(name, pattern);
}

Curves load_metrics_jsonl(const std::string& path, bool strict) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), "{}: cannot open", path);
  Curves curves;
  curves.source = path;
  std::string line;
  std::int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = fmt::format("{}: line {}", path, n);
    const nlohmann::json j = io::parse_json(line, where);
    TANDEM_CHECK(j.is_object(), "{}: expected a JSON object", where);
    std::map<std::string, double> row;
    for (const auto& [key, value] : j.items()) {
      if (value.is_number()) {
        row[key] = value.get<double>();
      } else if (value.is_null() || (key == "startup" && value.is_boolean())) {
        continue;  // a step's missing value; evaluation.on_startup's mark
      } else {
        // A run's own log may carry non-numeric extras; a reference file may not.
        TANDEM_CHECK(!strict, "{}: \"{}\" is not a number", where, key);
      }
    }
    add_row(curves, row, where, strict);
  }
  sort_curves(curves);
  return curves;
}

Curves load_metrics_csv(const std::string& path) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), "{}: cannot open", path);
  Curves curves;
  curves.source = path;
  std::string line;
  TANDEM_CHECK(static_cast<bool>(std::getline(in, line)), "{}: empty file (needs a header row)",
               path);
  std::vector<std::string> header = split_csv_line(line);
  for (const auto& h : header) {
    TANDEM_CHECK(h == "step" || h == "tokens" || is_known_metric(h),
                 "{}: line 1: unknown column \"{}\" (known: {})", path, h, kKnownColumns);
  }
  std::int64_t n = 1;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = fmt::format("{}: line {}", path, n);
    std::vector<std::string> cells = split_csv_line(line);
    TANDEM_CHECK(cells.size() == header.size(), "{}: {} cells, header has {}", where, cells.size(),
                 header.size());
    std::map<std::string, double> row;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (cells[i].empty()) continue;  // metric not measured at this point
      char* end = nullptr;
      double v = std::strtod(cells[i].c_str(), &end);
      TANDEM_CHECK(end && *end == '\0' && std::isfinite(v),
                   "{}: column \"{}\": \"{}\" is not a finite number", where, header[i], cells[i]);
      row[header[i]] = v;
    }
    add_row(curves, row, where, true);
  }
  sort_curves(curves);
  return curves;
}

Curves load_curves(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    std::string file = (fs::path(path) / "metrics.jsonl").string();
    TANDEM_CHECK(fs::exists(file), "{}: not a run directory (no metrics.jsonl)", path);
    Curves c = load_metrics_jsonl(file, false);
    c.source = path;
    return c;
  }
  TANDEM_CHECK(fs::exists(path), "{}: no such file or run directory", path);
  if (path.ends_with(".csv")) return load_metrics_csv(path);
  if (path.ends_with(".jsonl")) return load_metrics_jsonl(path, true);
  core::fail("{}: a reference must be a run directory, a .csv or a .jsonl file", path);
}

bool interpolate(const std::vector<Point>& curve, double tokens, double& value) {
  if (curve.empty() || tokens < curve.front().tokens || tokens > curve.back().tokens) return false;
  auto it = std::lower_bound(curve.begin(), curve.end(), tokens,
                             [](const Point& p, double t) { return p.tokens < t; });
  if (it->tokens == tokens || it == curve.begin()) {
    value = it->value;
    return true;
  }
  const Point& a = *(it - 1);
  const Point& b = *it;
  double w = (tokens - a.tokens) / (b.tokens - a.tokens);
  value = a.value + w * (b.value - a.value);
  return true;
}

}  // namespace tandem::report
