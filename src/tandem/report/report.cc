#include "tandem/report/report.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::report {
namespace fs = std::filesystem;
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c));
    if (keep) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (!keep && !out.empty() && out.back() != '-') out.push_back('-');
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

nlohmann::json series(const std::string& label, const std::vector<Point>& points) {
  nlohmann::json x = nlohmann::json::array(), y = nlohmann::json::array();
  for (const auto& p : points) {
    x.push_back(p.tokens);
    y.push_back(p.value);
  }
  return {{"label", label}, {"x", x}, {"y", y}};
}

std::string y_label(const std::string& metric) {
  if (metric == "train/loss") return "training loss (nats/token)";
  if (metric == "lr") return "learning rate";
  if (metric.ends_with("/loss")) return "held-out loss (nats/token)";
  if (metric.ends_with("/bpb") || metric.find("/bpb_v") != std::string::npos) {
    return "bits per byte";
  }
  if (metric.find("/ce_loss") != std::string::npos) return "CE loss per character";
  if (metric.find("/acc") != std::string::npos || metric.find("/len_norm") != std::string::npos) {
    return "accuracy";
  }
  return metric.substr(metric.rfind('/') + 1);
}

std::string fmt_tokens(double t) {
  if (t >= 1e9) return fmt::format("{:.3g}B", t / 1e9);
  if (t >= 1e6) return fmt::format("{:.3g}M", t / 1e6);
  if (t >= 1e3) return fmt::format("{:.3g}K", t / 1e3);
  return fmt::format("{:.0f}", t);
}

// A panel's verdict and the detail shown with it.
struct Verdict {
  std::string word;  // pass, FAIL, shown, run only, reference only, no overlap
  std::string detail;
  std::optional<double> tolerance;
};

Verdict verdict_of(const std::string& metric, const Comparison& comparison, const Curves& run,
                   const Curves& reference) {
  for (const auto& m : comparison.metrics) {
    if (m.metric != metric) continue;
    if (m.tokens.empty()) return {"no overlap", "", std::nullopt};
    std::string diff = fmt::format("max |diff| {:.4g}", m.max_abs_diff);
    if (!m.checked()) return {"shown", diff, std::nullopt};
    return {m.pass() ? "pass" : "FAIL", fmt::format("{} vs ±{:g}", diff, *m.tolerance),
            m.tolerance};
  }
  return {run.has(metric) ? "run only" : "reference only", "", std::nullopt};
}

std::string result_word(const MetricComparison& m) {
  if (!m.checked()) return m.tokens.empty() ? "no overlap" : "not checked";
  return m.pass() ? "pass" : "FAIL";
}

// Per held-out set: the point that came closest to alarming.
const AlarmPoint* closest_point(const AlarmCheck& c) {
  const AlarmPoint* best = nullptr;
  for (const auto& p : c.points) {
    if (!best || p.excess - p.allowance > best->excess - best->allowance) best = &p;
  }
  return best;
}

std::string alarm_rule_text(const AlarmResult& a) {
  return fmt::format(
      "A point alarms when the training loss fell below its expectation by more than "
      "threshold + z·se and by that much more than the held-out loss did (threshold {:g} nats; "
      "se from the training loss's own step-to-step noise σ; z = {:.2f}, the one-sided normal "
      "quantile at α = {:g} over the {} points tested).",
      a.threshold, a.z, a.alpha, a.tests);
}

nlohmann::json comparison_json(const Curves& run, const Curves& reference,
                               const Comparison& comparison, const AlarmResult& alarm) {
  nlohmann::json cj;
  cj["run"] = run.source;
  cj["reference"] = reference.source;
  cj["pass"] = comparison.pass();
  cj["alignment"] =
      "run points inside the reference's range; reference linearly interpolated "
      "in tokens";
  for (const auto& m : comparison.metrics) {
    cj["metrics"][m.metric] = {{"tolerance", m.tolerance ? nlohmann::json(*m.tolerance) : nullptr},
                               {"checked", m.checked()},
                               {"pass", m.pass()},
                               {"max_abs_diff", m.max_abs_diff},
                               {"worst_tokens", m.worst_tokens},
                               {"tokens", m.tokens},
                               {"run", m.run},
                               {"reference", m.reference},
                               {"diff", m.diff}};
  }
  auto& a = cj["repeated_data_alarm"];
  a = {{"triggered", alarm.triggered}, {"threshold", alarm.threshold},
       {"alpha", alarm.alpha},         {"z", alarm.z},
       {"points_tested", alarm.tests}, {"notes", alarm.notes}};
  for (const auto& f : alarm.findings) {
    a["findings"].push_back({{"heldout", f.heldout},
                             {"basis", f.basis},
                             {"tokens", f.tokens},
                             {"train_gap", f.train_gap},
                             {"heldout_gap", f.heldout_gap},
                             {"allowance", f.allowance}});
  }
  for (const auto& c : alarm.checks) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& q : c.points) {
      points.push_back({{"tokens", q.tokens},
                        {"train_gap", q.train_gap},
                        {"heldout_gap", q.heldout_gap},
                        {"excess", q.excess},
                        {"allowance", q.allowance},
                        {"alarm", q.alarm}});
    }
    a["checks"].push_back(
        {{"heldout", c.heldout}, {"basis", c.basis}, {"sigma", c.sigma}, {"points", points}});
  }
  if (alarm.duplicate_groups) cj["audit"]["duplicate_groups"] = *alarm.duplicate_groups;
  if (alarm.duplicate_instances) cj["audit"]["duplicate_instances"] = *alarm.duplicate_instances;
  return cj;
}

std::string html_page(const Curves& run, const Curves& reference, const Comparison& comparison,
                      const AlarmResult& alarm, const std::vector<FigureGroup>& groups,
                      const std::map<std::string, std::string>& figure_png) {
  const bool pass = comparison.pass() && !alarm.triggered;
  std::string h;
  h += "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>tandem compare: {}</title>\n", pass ? "PASS" : "FAIL");
  h += R"(<style>
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 24px; color: #222; max-width: 1500px; }
h1 .pass, td.pass { color: #1a7f37; } h1 .fail, td.fail { color: #c62828; font-weight: bold; }
td.muted { color: #777; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; } th { background: #f2f2f2; }
td.num { text-align: right; font-family: DejaVu Sans Mono, monospace; }
.box { padding: 8px 12px; margin: 8px 0; border-left: 6px solid; }
.box.clear { border-color: #1a7f37; background: #eef8f0; } .box.alarm { border-color: #c62828; background: #fdecec; }
img { max-width: 100%; border: 1px solid #ddd; margin: 4px 0 18px 0; }
p.small { font-size: 13px; color: #444; }
</style></head><body>
)";
  h += fmt::format("<h1>Run comparison: <span class=\"{}\">{}</span></h1>\n",
                   pass ? "pass" : "fail", pass ? "PASS" : "FAIL");
  h += fmt::format(
      "<p class=\"small\">run: <code>{}</code><br>reference: <code>{}</code><br>alignment: each "
      "run measurement inside the reference's token range, against the reference linearly "
      "interpolated in tokens</p>\n",
      html_escape(run.source), html_escape(reference.source));

  // Verdicts.
  std::size_t checked = 0, failed = 0;
  for (const auto& m : comparison.metrics) {
    checked += m.checked();
    failed += m.checked() && !m.pass();
  }
  h += fmt::format("<h2>Verdicts: {} of {} checked metrics within tolerance</h2>\n",
                   checked - failed, checked);
  h += "<table><tr><th>metric</th><th>points</th><th>tolerance</th><th>max |diff|</th>"
       "<th>at tokens</th><th>result</th></tr>\n";
  for (const auto& m : comparison.metrics) {
    const std::string word = result_word(m);
    const std::string cls = word == "pass" ? "pass" : word == "FAIL" ? "fail" : "muted";
    h += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td "
        "class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{}\">{}</td></tr>\n",
        html_escape(m.metric), m.tokens.size(),
        m.tolerance ? fmt::format("±{:g}", *m.tolerance) : "-",
        m.tokens.empty() ? "-" : fmt::format("{:.5f}", m.max_abs_diff),
        m.tokens.empty() ? "-" : fmt_tokens(m.worst_tokens), cls, word);
  }
  h += "</table>\n";
  if (!comparison.only_in_run.empty()) {
    h += fmt::format("<p class=\"small\">Only in the run: {}</p>\n",
                     html_escape(fmt::format("{}", fmt::join(comparison.only_in_run, ", "))));
  }
  if (!comparison.only_in_reference.empty()) {
    h += fmt::format("<p class=\"small\">Only in the reference: {}</p>\n",
                     html_escape(fmt::format("{}", fmt::join(comparison.only_in_reference, ", "))));
  }

  // The repeated-data alarm.
  h += fmt::format("<h2>Repeated-data alarm: {}</h2>\n", alarm.triggered ? "ALARM" : "clear");
  h += fmt::format("<div class=\"box {}\">{}</div>\n", alarm.triggered ? "alarm" : "clear",
                   alarm.triggered ? "Training loss fell below its expectation while held-out "
                                     "loss did not fall with it (the double-reading signature)."
                                   : "No held-out point shows training loss falling below its "
                                     "expectation beyond the noise allowance.");
  if (!alarm.checks.empty()) {
    h += "<p class=\"small\">" + html_escape(alarm_rule_text(alarm)) + "</p>\n";
    h += "<table><tr><th>held-out set</th><th>basis</th><th>training-loss σ</th><th>points</th>"
         "<th>closest point</th><th>train gap</th><th>held-out gap</th><th>excess</th>"
         "<th>allowance</th><th>result</th></tr>\n";
    for (const auto& c : alarm.checks) {
      const AlarmPoint* p = closest_point(c);
      std::size_t alarms = 0;
      for (const auto& q : c.points) alarms += q.alarm;
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=\"num\">{:.4f}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num\">{:+.4f}</td><td class=\"num\">{:+.4f}</td>"
          "<td class=\"num\">{:+.4f}</td><td class=\"num\">{:.4f}</td><td class=\"{}\">{}</td>"
          "</tr>\n",
          html_escape(c.heldout), c.basis, c.sigma, c.points.size(), fmt_tokens(p->tokens),
          p->train_gap, p->heldout_gap, p->excess, p->allowance, alarms ? "fail" : "pass",
          alarms ? fmt::format("ALARM at {} of {} points", alarms, c.points.size())
                 : std::string("clear"));
    }
    h += "</table>\n";
  }
  if (alarm.duplicate_groups || alarm.duplicate_instances) {
    h += fmt::format("<p>Data audit: {} duplicate groups, {} duplicate instances.</p>\n",
                     alarm.duplicate_groups.value_or(0), alarm.duplicate_instances.value_or(0));
  }
  for (const auto& n : alarm.notes) h += "<p class=\"small\">" + html_escape(n) + "</p>\n";

  // Curves.
  if (!figure_png.empty()) {
    h += "<h2>Curves: run against reference</h2>\n";
    for (const auto& g : groups) {
      auto it = figure_png.find(g.file);
      if (it == figure_png.end()) continue;
      // The figure carries its group's title.
      h += fmt::format("<img alt=\"{}\" src=\"data:image/png;base64,{}\">\n", html_escape(g.title),
                       it->second);
    }
  }
  h += "</body></html>\n";
  return h;
}

std::string markdown_page(const Curves& run, const Curves& reference, const Comparison& comparison,
                          const AlarmResult& alarm, const std::vector<FigureGroup>& groups,
                          bool with_figures) {
  std::string md;
  md += fmt::format("# Run comparison: {}\n\n",
                    comparison.pass() && !alarm.triggered ? "PASS" : "FAIL");
  md += fmt::format("- run: `{}`\n- reference: `{}`\n", run.source, reference.source);
  md +=
      "- alignment: each run measurement inside the reference's token range, against the "
      "reference linearly interpolated in tokens\n\n";
  md += "| metric | points | tolerance | max abs diff | at tokens | result |\n";
  md += "|---|---:|---:|---:|---:|---|\n";
  for (const auto& m : comparison.metrics) {
    const std::string word = result_word(m);
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", m.metric, m.tokens.size(),
                      m.tolerance ? fmt::format("±{:g}", *m.tolerance) : "-",
                      m.tokens.empty() ? "-" : fmt::format("{:.5f}", m.max_abs_diff),
                      m.tokens.empty() ? "-" : fmt_tokens(m.worst_tokens),
                      word == "FAIL" ? "**FAIL**" : word);
  }
  if (!comparison.only_in_run.empty()) {
    md += fmt::format("\nOnly in the run: {}\n", fmt::join(comparison.only_in_run, ", "));
  }
  if (!comparison.only_in_reference.empty()) {
    md +=
        fmt::format("\nOnly in the reference: {}\n", fmt::join(comparison.only_in_reference, ", "));
  }
  md += fmt::format("\n## Repeated-data alarm: {}\n\n",
                    alarm.triggered ? "**ALARM** (training loss fell below its expectation while "
                                      "held-out loss did not fall with it)"
                                    : "clear");
  if (!alarm.checks.empty()) {
    md += alarm_rule_text(alarm) + "\n\n";
    md +=
        "| held-out set | basis | training-loss σ | points | closest point | train gap | "
        "held-out gap | excess | allowance | result |\n|---|---|---:|---:|---:|---:|---:|---:|"
        "---:|---|\n";
    for (const auto& c : alarm.checks) {
      const AlarmPoint* p = closest_point(c);
      std::size_t alarms = 0;
      for (const auto& q : c.points) alarms += q.alarm;
      md += fmt::format(
          "| {} | {} | {:.4f} | {} | {} | {:+.4f} | {:+.4f} | {:+.4f} | {:.4f} | {} |\n", c.heldout,
          c.basis, c.sigma, c.points.size(), fmt_tokens(p->tokens), p->train_gap, p->heldout_gap,
          p->excess, p->allowance,
          alarms ? fmt::format("**ALARM** at {} of {}", alarms, c.points.size())
                 : std::string("clear"));
    }
    md += "\n";
  }
  if (alarm.duplicate_groups || alarm.duplicate_instances) {
    md += fmt::format("Data audit: {} duplicate groups, {} duplicate instances.\n\n",
                      alarm.duplicate_groups.value_or(0), alarm.duplicate_instances.value_or(0));
  }
  for (const auto& n : alarm.notes) md += "- " + n + "\n";
  if (with_figures) {
    md += "\n## Curves: run against reference\n\n";
    for (const auto& g : groups)
      md += fmt::format("### {}\n\n![{}]({})\n\n", g.title, g.title, g.file);
  }
  return md;
}

}  // namespace

std::vector<FigureGroup> figure_groups(const Curves& run, const Curves& reference) {
  std::set<std::string> names;
  for (const auto& [m, _] : run.metrics) names.insert(m);
  for (const auto& [m, _] : reference.metrics) names.insert(m);
  std::vector<FigureGroup> groups;
  auto take = [&](const std::string& title, auto&& select) {
    FigureGroup g{title, "figure-" + slug(title) + ".png", {}};
    for (auto it = names.begin(); it != names.end();) {
      if (select(*it)) {
        g.metrics.push_back(*it);
        it = names.erase(it);
      } else {
        ++it;
      }
    }
    if (!g.metrics.empty()) groups.push_back(std::move(g));
  };
  // Training first, in a reading order rather than alphabetical.
  FigureGroup training{"Training", "figure-training.png", {}};
  for (const char* m : {"train/loss", "train/z_loss", "train/grad_norm", "lr"}) {
    if (names.erase(m)) training.metrics.push_back(m);
  }
  if (!training.metrics.empty()) groups.push_back(std::move(training));
  take("Held-out loss",
       [](const std::string& m) { return m.starts_with("eval/") && m.ends_with("/loss"); });
  // Perplexity is exp(loss): the table carries it, the figures do not repeat it.
  for (auto it = names.begin(); it != names.end();) {
    it = it->starts_with("eval/") && it->ends_with("/ppl") ? names.erase(it) : std::next(it);
  }
  std::set<std::string> downstream_metrics;
  for (const auto& m : names) {
    if (m.starts_with("downstream/")) downstream_metrics.insert(m.substr(m.rfind('/') + 1));
  }
  for (const auto& metric : downstream_metrics) {
    take("Downstream " + metric, [&](const std::string& m) {
      return m.starts_with("downstream/") && m.substr(m.rfind('/') + 1) == metric;
    });
  }
  take("Throughput and stability", [](const std::string& m) {
    return m == "tokens_per_s" || m == "mfu" || m == "mfu_olmo_core" || m == "skipped_steps" ||
           m == "nonfinite_steps";
  });
  take("Other", [](const std::string&) { return true; });
  return groups;
}

std::string find_plot_script(const std::string& hint) {
  std::vector<std::string> candidates;
  if (!hint.empty()) candidates.push_back(hint);
  if (const char* env = std::getenv("TANDEM_PLOT_SCRIPT"); env && *env) candidates.push_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back((exe.parent_path().parent_path() / "tools/plot_report.py").string());
    candidates.push_back(
        (exe.parent_path().parent_path().parent_path() / "tools/plot_report.py").string());
  }
  candidates.push_back((fs::current_path() / "tools/plot_report.py").string());
  for (const auto& c : candidates) {
    if (fs::exists(c)) return c;
  }
  core::fail("plot script tools/plot_report.py not found (tried {}); set TANDEM_PLOT_SCRIPT",
             fmt::join(candidates, ", "));
}

std::string find_python_with_matplotlib() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TANDEM_PYTHON"); env && *env) candidates.push_back(env);
  candidates.push_back("/usr/bin/python3");
  candidates.push_back("python3");
  for (const auto& py : candidates) {
    std::string cmd = shell_quote(py) + " -c 'import matplotlib' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  core::fail(
      "no Python interpreter with matplotlib (tried $TANDEM_PYTHON, /usr/bin/python3, python3); "
      "install python3-matplotlib (scripts/setup.sh) or pass --no-plots");
}

std::vector<std::string> write_report(const std::string& out_dir, const Curves& run,
                                      const Curves& reference, const Comparison& comparison,
                                      const AlarmResult& alarm, const ReportOptions& options) {
  fs::create_directories(out_dir);
  core::write_file_atomic(out_dir + "/comparison.json",
                          comparison_json(run, reference, comparison, alarm).dump(1) + "\n");

  // The figures: one per group, one panel per metric with its verdict.
  const std::vector<FigureGroup> groups = figure_groups(run, reference);
  nlohmann::json plot;
  plot["groups"] = nlohmann::json::array();
  for (const auto& g : groups) {
    nlohmann::json panels = nlohmann::json::array();
    for (const auto& m : g.metrics) {
      Verdict v = verdict_of(m, comparison, run, reference);
      nlohmann::json panel{{"title", m},
                           {"ylabel", y_label(m)},
                           {"verdict", v.word},
                           {"detail", v.detail},
                           {"tolerance", v.tolerance ? nlohmann::json(*v.tolerance) : nullptr},
                           {"series", nlohmann::json::array()}};
      if (run.has(m)) panel["series"].push_back(series(options.run_label, run.metrics.at(m)));
      if (reference.has(m)) {
        panel["series"].push_back(series(options.reference_label, reference.metrics.at(m)));
      }
      panels.push_back(panel);
    }
    plot["groups"].push_back(
        {{"file", g.file}, {"title", g.title}, {"xlabel", "training tokens"}, {"panels", panels}});
  }
  core::write_file_atomic(out_dir + "/plot_data.json", plot.dump() + "\n");
  std::vector<std::string> figures;
  std::map<std::string, std::string> embedded;  // file -> base64 PNG
  if (options.plots && !groups.empty()) {
    std::string script = find_plot_script(options.plot_script);
    std::string python = find_python_with_matplotlib();
    std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " +
                      shell_quote(out_dir + "/plot_data.json") + " " + shell_quote(out_dir);
    int rc = std::system(cmd.c_str());
    TANDEM_CHECK(rc == 0, "plotting failed (exit {}): {}", rc, cmd);
    for (const auto& g : groups) {
      const std::string path = out_dir + "/" + g.file;
      TANDEM_CHECK(fs::exists(path), "figure {} was not written", path);
      figures.push_back(path);
      embedded[g.file] = base64(core::read_file(path));
    }
  }
  core::write_file_atomic(out_dir + "/report.html",
                          html_page(run, reference, comparison, alarm, groups, embedded));
  core::write_file_atomic(out_dir + "/summary.md", markdown_page(run, reference, comparison, alarm,
                                                                 groups, !figures.empty()));
  return figures;
}

}  // namespace tandem::report
