// `tandem data audit CONFIG.yaml [key=value ...]`: simulates world sizes and resume points and
// exits 0 only when every global batch is the same on every world size, ranks' shares are
// disjoint and cover each batch, and every instance appears exactly once per epoch.
#include <fmt/format.h>

#include <memory>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/data/audit.h"
#include "tandem/data/data_config.h"

namespace tandem::cli {
namespace {

struct AuditArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string world_sizes = "1,2,4,8";
  std::vector<std::string> resume_at;
  std::uint64_t epochs = 2;
  bool json = false;
  bool no_duplicates = false;
};

std::vector<std::uint64_t> parse_world_sizes(const std::string& text) {
  std::vector<std::uint64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    std::uint64_t w = 0;
    try {
      w = std::stoull(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TANDEM_CHECK(used == item.size() && !item.empty() && w > 0,
                 "--world-sizes '{}': '{}' is not a positive integer", text, item);
    out.push_back(w);
  }
  TANDEM_CHECK(!out.empty(), "--world-sizes is empty");
  return out;
}

int run_audit_command(const AuditArgs& a) {
  data::DataConfig config = data::load_data_config(a.config, a.overrides);
  data::AuditOptions opts;
  opts.world_sizes = parse_world_sizes(a.world_sizes);
  for (const auto& r : a.resume_at) opts.resume_points.push_back(data::parse_resume_point(r));
  opts.epochs = a.epochs;
  opts.check_duplicates = !a.no_duplicates;
  data::AuditReport report = data::run_audit(config, opts);
  if (a.json) {
    fmt::print("{}\n", report.to_json().dump());
  } else {
    fmt::print("{}", report.to_text());
  }
  return report.ok ? 0 : 1;
}

}  // namespace

void add_data_audit_command(CLI::App& data, int& exit_code) {
  auto args = std::make_shared<AuditArgs>();
  CLI::App* cmd = data.add_subcommand(
      "audit", "Prove the data order: same global batches on every world size, exactly once");
  cmd->add_option("config", args->config, "YAML config with a data: mapping")->required();
  cmd->add_option("overrides", args->overrides, "key=value overrides, e.g. data.seed=7");
  cmd->add_option("--world-sizes", args->world_sizes, "comma-separated world sizes to simulate");
  cmd->add_option("--resume-at", args->resume_at,
                  "STEP:W (or STEP:W_BEFORE>W): save at global step STEP, resume on W ranks");
  cmd->add_option("--epochs", args->epochs, "epochs to simulate")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "print the report as one JSON object");
  cmd->add_flag("--no-duplicates", args->no_duplicates, "skip the duplicate-content scan");
  cmd->callback([args, &exit_code] { exit_code = run_audit_command(*args); });
}

}  // namespace tandem::cli
