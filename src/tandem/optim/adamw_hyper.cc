// AdamW's hyper-parameter check, apart from the optimiser itself: reading a config needs it,
// the compute backend that adamw.cc drives does not (the fuzz targets link this file alone).
#include <fnmatch.h>

#include <cmath>
#include <map>
#include <string>

#include "tandem/core/error.h"
#include "tandem/optim/adamw.h"

namespace tandem::optim {

void AdamWHyper::validate() const {
  TANDEM_CHECK(beta1 >= 0.0 && beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got {}", beta1);
  TANDEM_CHECK(beta2 >= 0.0 && beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got {}", beta2);
  TANDEM_CHECK(eps >= 0.0 && std::isfinite(eps), "AdamW: eps must be >= 0, got {}", eps);
  TANDEM_CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
               "AdamW: weight_decay must be >= 0, got {}", weight_decay);
  for (const WeightDecayGroup& g : groups.value_or(std::vector<WeightDecayGroup>{}))
    TANDEM_CHECK(g.weight_decay >= 0.0 && std::isfinite(g.weight_decay),
                 "AdamW: a group's weight_decay must be >= 0, got {}", g.weight_decay);
}

double AdamWHyper::weight_decay_of(const ParamBuffer& p) const {
  if (!groups) return p.weight_decay ? weight_decay : 0.0;
  for (const WeightDecayGroup& g : *groups)
    for (const std::string& pattern : g.params)
      if (matches_param_pattern(pattern, p.name)) return g.weight_decay;
  return weight_decay;
}

bool matches_param_pattern(std::string_view pattern, std::string_view name) {
  // FNM_NOESCAPE: a backslash is an ordinary character, as in Python's fnmatch; no FNM_PATHNAME
  // or FNM_PERIOD, so `*` matches '/' and '.' too.
  return ::fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), FNM_NOESCAPE) == 0;
}

void check_weight_decay_groups(const std::vector<WeightDecayGroup>& groups,
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
