// AdamW's hyper-parameter check, apart from the optimiser itself: reading a config needs it,
// the compute backend that adamw.cc drives does not (the fuzz targets link this file alone).
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "tandem/core/error.h"
#include "tandem/optim/adamw.h"

namespace tandem::optim {

namespace {

void check_adam_options(double beta1, double beta2, double eps, double weight_decay,
                        const char* whose) {
  TANDEM_CHECK(beta1 >= 0.0 && beta1 < 1.0, "AdamW: {}beta1 must be in [0, 1), got {}", whose,
               beta1);
  TANDEM_CHECK(beta2 >= 0.0 && beta2 < 1.0, "AdamW: {}beta2 must be in [0, 1), got {}", whose,
               beta2);
  TANDEM_CHECK(eps >= 0.0 && std::isfinite(eps), "AdamW: {}eps must be >= 0, got {}", whose, eps);
  TANDEM_CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
               "AdamW: {}weight_decay must be >= 0, got {}", whose, weight_decay);
}

}  // namespace

void ParamGroupOverride::validate() const {
  TANDEM_CHECK(beta1.has_value() == beta2.has_value(),
               "AdamW: a group gives both betas or neither");
  TANDEM_CHECK(!lr || (*lr >= 0.0 && std::isfinite(*lr)),
               "AdamW: a group's lr must be >= 0, got {}", lr.value_or(0.0));
  // The optimiser's values stand in for those the group does not give (each checked there).
  check_adam_options(beta1.value_or(0.0), beta2.value_or(0.0), eps.value_or(0.0),
                     weight_decay.value_or(0.0), "a group's ");
}

void AdamWHyper::validate() const {
  check_adam_options(beta1, beta2, eps, weight_decay, "");
  if (groups)
    for (const ParamGroupOverride& g : *groups) g.validate();
}

ParamHyper AdamWHyper::resolve(const ParamBuffer& p) const {
  ParamHyper h{lr_slots() - 1, beta1, beta2, eps, weight_decay};
  if (!groups) {
    if (!p.weight_decay) h.weight_decay = 0.0;
    return h;
  }
  for (std::size_t i = 0; i < groups->size(); ++i) {
    const ParamGroupOverride& g = (*groups)[i];
    const bool member = std::any_of(g.params.begin(), g.params.end(), [&](const std::string& pat) {
      return matches_param_pattern(pat, p.name);
    });
    if (!member) continue;
    if (g.lr) h.lr_slot = i;
    h.beta1 = g.beta1.value_or(beta1);
    h.beta2 = g.beta2.value_or(beta2);
    h.eps = g.eps.value_or(eps);
    h.weight_decay = g.weight_decay.value_or(weight_decay);
    return h;
  }
  return h;
}

bool matches_param_pattern(std::string_view pattern, std::string_view name) {
  // FNM_NOESCAPE: a backslash is an ordinary character, as in Python's fnmatch; no FNM_PATHNAME
  // or FNM_PERIOD, so `*` matches '/' and '.' too.
  return ::fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), FNM_NOESCAPE) == 0;
}

void check_group_overrides(const std::vector<ParamGroupOverride>& groups,
                           const std::vector<std::string>& parameter_names) {
  std::map<std::string, std::size_t> group_of;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const std::string& pattern : groups[g].params) {
      bool matched = false;
      for (const std::string& name : parameter_names) {
        if (!matches_param_pattern(pattern, name)) continue;
        matched = true;
        auto [it, fresh] = group_of.emplace(name, g);
        TANDEM_CHECK(fresh || it->second == g,
                     "optim.group_overrides: parameter '{}' is in groups {} and {} (a parameter "
                     "may be in one group only)",
                     name, it->second, g);
      }
      TANDEM_CHECK(matched,
                   "optim.group_overrides[{}]: pattern '{}' matches no parameter (names are "
                   "OLMo-core's, e.g. embeddings.weight, blocks.0.attention.w_q.weight)",
                   g, pattern);
    }
  }
}

}  // namespace tandem::optim
