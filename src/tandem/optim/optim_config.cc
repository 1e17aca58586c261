#include "tandem/optim/optim_config.h"

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
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

// [beta1, beta2] at `key` of `s`.
std::pair<double, double> read_betas(io::ConfigSection& s, const std::string& key) {
  s.mark_used(key);
  YAML::Node b = s.raw(key);
  TANDEM_CHECK(b.IsSequence() && b.size() == 2, "{}: expected [beta1, beta2]", s.where(key));
  return {io::yaml_as<double>(b[0], s.where(key + "[0]"), "a number"),
          io::yaml_as<double>(b[1], s.where(key + "[1]"), "a number")};
}

// OLMo-core's group_overrides: [{params: [pattern, ...], opts: {lr, weight_decay, betas, eps}},
// ...]; absent: the OLMo 3 recipe (set by the model's parameter flags); null or []: no overrides,
// every parameter decayed.
std::optional<std::vector<ParamGroupOverride>> read_group_overrides(io::ConfigSection& s) {
  s.mark_used("group_overrides");
  if (!s.has("group_overrides")) return std::nullopt;
  std::vector<ParamGroupOverride> groups;
  if (s.raw("group_overrides").IsNull()) return groups;
  for (io::ConfigSection& g : s.section_list("group_overrides")) {
    ParamGroupOverride group;
    group.params = g.get_string_list("params");
    TANDEM_CHECK(!group.params.empty(), "{} must name at least one parameter pattern",
                 g.where("params"));
    const YAML::Node given = g.raw("opts");
    TANDEM_CHECK(given.IsMap(),
                 "{}: expected a mapping of AdamW options (lr, weight_decay, betas, "
                 "eps; {{}} for none)",
                 g.where("opts"));
    io::ConfigSection opts = g.section("opts");
    for (const auto& kv : given) {
      const std::string key = kv.first.as<std::string>();
      TANDEM_CHECK(key == "lr" || key == "weight_decay" || key == "betas" || key == "eps",
                   "{}: a group overrides lr, weight_decay, betas or eps (AdamW's options in "
                   "torch's names), not '{}'",
                   opts.where(key), key);
    }
    auto number = [&](const char* key) -> std::optional<double> {
      if (!opts.has(key)) return std::nullopt;
      return opts.get_double(key);
    };
    group.lr = number("lr");
    group.weight_decay = number("weight_decay");
    group.eps = number("eps");
    if (opts.has("betas")) std::tie(group.beta1, group.beta2) = read_betas(opts, "betas");
    try {
      group.validate();
    } catch (const core::Error& e) {
      core::fail("{}: {}", g.where("opts"), e.what());
    }
    opts.finish();
    g.finish();
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

std::vector<double> scheduled_lrs(const OptimConfig& config, const Schedule& schedule,
                                  std::int64_t step, const TrainingHorizon& horizon) {
  const double lr = scheduled_lr(schedule, config.lr, step, horizon);
  std::vector<double> lrs(config.adamw.lr_slots(), lr);
  const auto& groups = config.adamw.groups;
  for (std::size_t i = 0; groups && i < groups->size(); ++i)
    if ((*groups)[i].lr) lrs[i] = scheduled_lr(schedule, *(*groups)[i].lr, step, horizon);
  return lrs;
}

OptimConfig read_optim_config(io::ConfigSection s) {
  OptimConfig c;
  std::string name = s.get_string("name", "skip_step_adamw");
  TANDEM_CHECK(name == "skip_step_adamw" || name == "adamw",
               "{}: unknown optimiser '{}' (expected skip_step_adamw or adamw)", s.where("name"),
               name);
  c.skip_step = name == "skip_step_adamw";
  // Each name's reference arithmetic: OLMo-core's SkipStepAdamW on its foreach path (its default)
  // or its single-tensor one, or torch.optim.AdamW's single-tensor path.
  c.adamw.arithmetic = kernels::AdamWArithmetic::torch_adamw;
  if (c.skip_step)
    c.adamw.arithmetic = s.get_bool("foreach", true) ? kernels::AdamWArithmetic::olmo_core_foreach
                                                     : kernels::AdamWArithmetic::olmo_core_single;
  c.lr = s.get_double("lr", c.lr);
  TANDEM_CHECK(c.lr >= 0.0 && std::isfinite(c.lr), "{} must be >= 0, got {}", s.where("lr"), c.lr);
  if (s.has("betas")) std::tie(c.adamw.beta1, c.adamw.beta2) = read_betas(s, "betas");
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
