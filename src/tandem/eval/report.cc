#include "tandem/eval/report.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::eval {
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

std::string file_name_for(const std::string& metric) {
  std::string out;
  for (char c : metric) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return out + ".png";
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
  if (metric.ends_with("/bpb")) return "bits per byte";
  if (metric.ends_with("/ce_loss")) return "CE loss per character";
  if (metric.find("/acc") != std::string::npos) return "accuracy";
  return metric;
}

bool plotted(const std::string& metric) {
  return metric == "train/loss" || metric == "lr" ||
         (metric.starts_with("eval/") && metric.ends_with("/loss")) ||
         metric.starts_with("downstream/");
}

std::string fmt_tokens(double t) {
  if (t >= 1e9) return fmt::format("{:.3g}B", t / 1e9);
  if (t >= 1e6) return fmt::format("{:.3g}M", t / 1e6);
  if (t >= 1e3) return fmt::format("{:.3g}K", t / 1e3);
  return fmt::format("{:.0f}", t);
}

}  // namespace

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
  fail("plot script tools/plot_report.py not found (tried {}); set TANDEM_PLOT_SCRIPT",
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
  fail(
      "no Python interpreter with matplotlib (tried $TANDEM_PYTHON, /usr/bin/python3, python3); "
      "install python3-matplotlib (scripts/setup.sh) or pass --no-plots");
}

std::vector<std::string> write_report(const std::string& out_dir, const Curves& run,
                                      const Curves& reference, const Comparison& comparison,
                                      const AlarmResult& alarm, const ReportOptions& options) {
  fs::create_directories(out_dir);

  // comparison.json
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
  cj["repeated_data_alarm"] = {{"triggered", alarm.triggered},
                               {"z", alarm.z},
                               {"points_tested", alarm.tests},
                               {"notes", alarm.notes}};
  for (const auto& f : alarm.findings) {
    cj["repeated_data_alarm"]["findings"].push_back({{"heldout", f.heldout},
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
    cj["repeated_data_alarm"]["checks"].push_back(
        {{"heldout", c.heldout}, {"basis", c.basis}, {"sigma", c.sigma}, {"points", points}});
  }
  if (alarm.duplicate_groups) cj["audit"]["duplicate_groups"] = *alarm.duplicate_groups;
  if (alarm.duplicate_instances) cj["audit"]["duplicate_instances"] = *alarm.duplicate_instances;
  write_file_atomic(out_dir + "/comparison.json", cj.dump(1) + "\n");

  // Plots.
  std::set<std::string> names;
  for (const auto& [m, _] : run.metrics) {
    if (plotted(m)) names.insert(m);
  }
  for (const auto& [m, _] : reference.metrics) {
    if (plotted(m)) names.insert(m);
  }
  nlohmann::json plot;
  plot["figures"] = nlohmann::json::array();
  std::vector<std::string> pngs;
  for (const auto& m : names) {
    nlohmann::json fig{{"file", file_name_for(m)},
                       {"title", m},
                       {"ylabel", y_label(m)},
                       {"xlabel", "training tokens"},
                       {"series", nlohmann::json::array()}};
    if (run.has(m)) fig["series"].push_back(series(options.run_label, run.metrics.at(m)));
    if (reference.has(m)) {
      fig["series"].push_back(series(options.reference_label, reference.metrics.at(m)));
    }
    plot["figures"].push_back(fig);
    pngs.push_back(out_dir + "/" + file_name_for(m));
  }
  write_file_atomic(out_dir + "/plot_data.json", plot.dump() + "\n");
  if (options.plots && !pngs.empty()) {
    std::string script = find_plot_script(options.plot_script);
    std::string python = find_python_with_matplotlib();
    std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " +
                      shell_quote(out_dir + "/plot_data.json") + " " + shell_quote(out_dir);
    int rc = std::system(cmd.c_str());
    TANDEM_CHECK(rc == 0, "plotting failed (exit {}): {}", rc, cmd);
    for (const auto& p : pngs) TANDEM_CHECK(fs::exists(p), "plot {} was not written", p);
  } else {
    pngs.clear();
  }

  // summary.md
  std::string md;
  md += fmt::format("# Run comparison: {}\n\n", comparison.pass() ? "PASS" : "FAIL");
  md += fmt::format("- run: `{}`\n- reference: `{}`\n", run.source, reference.source);
  md +=
      "- alignment: each run measurement inside the reference's token range, against the "
      "reference linearly interpolated in tokens\n\n";
  md += "| metric | points | tolerance | max abs diff | at tokens | result |\n";
  md += "|---|---:|---:|---:|---:|---|\n";
  for (const auto& m : comparison.metrics) {
    std::string result = !m.checked() ? (m.tokens.empty() ? "no overlap" : "not checked")
                                      : (m.pass() ? "pass" : "**FAIL**");
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", m.metric, m.tokens.size(),
                      m.tolerance ? fmt::format("±{:g}", *m.tolerance) : "-",
                      m.tokens.empty() ? "-" : fmt::format("{:.5f}", m.max_abs_diff),
                      m.tokens.empty() ? "-" : fmt_tokens(m.worst_tokens), result);
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
                                      "held-out loss did not improve)"
                                    : "clear");
  if (alarm.duplicate_groups || alarm.duplicate_instances) {
    md += fmt::format("Data audit: {} duplicate groups, {} duplicate instances.\n\n",
                      alarm.duplicate_groups.value_or(0), alarm.duplicate_instances.value_or(0));
  }
  if (!alarm.findings.empty()) {
    md +=
        "| held-out set | basis | tokens | train gap | held-out gap |\n|---|---|---:|---:|---:|\n";
    for (const auto& f : alarm.findings) {
      md += fmt::format("| {} | {} | {} | {:.4f} | {:.4f} |\n", f.heldout, f.basis,
                        fmt_tokens(f.tokens), f.train_gap, f.heldout_gap);
    }
    md += "\n";
  }
  for (const auto& n : alarm.notes) md += "- " + n + "\n";
  if (!pngs.empty()) {
    md += "\n## Plots\n\n";
    for (const auto& p : pngs) {
      std::string f = fs::path(p).filename().string();
      md += fmt::format("![{}]({})\n", f, f);
    }
  }
  write_file_atomic(out_dir + "/summary.md", md);
  return pngs;
}

}  // namespace tandem::eval
