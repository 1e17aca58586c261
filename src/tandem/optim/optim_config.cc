#include "tandem/optim/optim_config.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

std::optional<double> optional_positive(io::ConfigSection& s, const std::string& key,
                                        double fallback) {
  s.mark_used(key);
  if (s.raw(key).IsDefined() && s.raw(key).IsNull()) return std::nullopt;  // explicit null: off
  double v = s.get_double(key, fallback);
  TANDEM_CHECK(v > 0.0 && std::isfinite(v), "{} must be > 0 (or null to turn it off), got {}",
               s.where(key), v);
  return v;
}

// OLMo-core's group_overrides: [{params: [pattern, ...], opts: {weight_decay: x}}, ...]; absent:
// the OLMo 3 recipe (set by the model's parameter flags); null or []: no overrides, every
// parameter decayed. Only weight_decay may be overridden.
std::optional<std::vector<WeightDecayGroup>> read_group_overrides(io::ConfigSection& s) {
  s.mark_used("group_overrides");
  if (!s.has("group_overrides")) return std::nullopt;
  std::vector<WeightDecayGroup> groups;
  if (s.raw("group_overrides").IsNull()) return groups;
  for (io::ConfigSection& g : s.section_list("group_overrides")) {
    WeightDecayGroup group;
    group.params = g.get_string_list("params");
    TANDEM_CHECK(!group.params.empty(), "{} must name at least one parameter pattern",
                 g.where("params"));
    io::ConfigSection opts = g.section("opts");
    const YAML::Node given = g.raw("opts");
    for (const auto& kv : given.IsMap() ? given : YAML::Node(YAML::NodeType::Map)) {
      const std::string key = kv.first.as<std::string>();
      TANDEM_CHECK(key == "weight_decay",
                   "{}: tandem overrides only weight_decay per group (OLMo-core passes any torch "
                   "option, such as a group's own lr)",
                   opts.where(key));
    }
    TANDEM_CHECK(opts.has("weight_decay"), "{}: give weight_decay", g.where("opts"));
    group.weight_decay = opts.get_double("weight_decay");
    TANDEM_CHECK(group.weight_decay >= 0.0 && std::isfinite(group.weight_decay),
                 "{} must be >= 0, got {}", opts.where("weight_decay"), group.weight_decay);
    opts.finish();
    g.finish();
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

OptimConfig read_optim_config(io::ConfigSection s) {
  OptimConfig c;
  std::string name = s.get_string("name", "skip_step_adamw");
  TANDEM_CHECK(name == "skip_step_adamw" || name == "adamw",
               "{}: unknown optimiser '{}' (expected skip_step_adamw or adamw)", s.where("name"),
               name);
  c.skip_step = name == "skip_step_adamw";
  c.lr = s.get_double("lr", c.lr);
  TANDEM_CHECK(c.lr >= 0.0 && std::isfinite(c.lr), "{} must be >= 0, got {}", s.where("lr"), c.lr);
  if (s.has("betas")) {
    YAML::Node b = s.raw("betas");
    TANDEM_CHECK(b.IsSequence() && b.size() == 2, "{}: expected [beta1, beta2]", s.where("betas"));
    c.adamw.beta1 = io::yaml_as<double>(b[0], s.where("betas[0]"), "a number");
    c.adamw.beta2 = io::yaml_as<double>(b[1], s.where("betas[1]"), "a number");
  }
  s.mark_used("betas");
  c.adamw.eps = s.get_double("eps", c.adamw.eps);
  c.adamw.weight_decay = s.get_double("weight_decay", c.adamw.weight_decay);
  c.adamw.groups = read_group_overrides(s);
  try {
    c.adamw.validate();
  } catch (const core::Error& e) {
    core::fail("{}: {}", s.where(""), e.what());
  }
  c.skip.rolling_interval_length =
      s.get_int("rolling_interval_length", c.skip.rolling_interval_length);
  c.skip.sigma_factor = s.get_double("sigma_factor", c.skip.sigma_factor);
  try {
    c.skip.validate();
  } catch (const core::Error& e) {
    core::fail("{}: {}", s.where(""), e.what());
  }
  c.max_grad_norm = optional_positive(s, "max_grad_norm", 1.0);
  c.z_loss_multiplier = optional_positive(s, "z_loss_multiplier", 1e-5);
  s.finish();
  return c;
}

}  // namespace tandem::optim
