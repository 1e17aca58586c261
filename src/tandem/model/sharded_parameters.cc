#include "tandem/model/sharded_parameters.h"

namespace tandem::model {

std::vector<ParameterUnit> parameter_units(const ParameterLayout& layout) {
  auto begin_of = [&](const std::string& name) { return layout.entry(name).offset; };
  auto end_of = [&](const std::string& name) {
    const ParameterEntry& e = layout.entry(name);
    return e.offset + e.numel;
  };
  std::vector<ParameterUnit> units;
  units.push_back({begin_of("embeddings.weight"), end_of("embeddings.weight")});
  for (std::int64_t l = 0; layout.has(block_param(l, "attention.w_q.weight")); ++l)
    units.push_back({begin_of(block_param(l, "attention.w_q.weight")),
                     end_of(block_param(l, "feed_forward_norm.weight"))});
  units.push_back({begin_of("lm_head.norm.weight"), end_of("lm_head.w_out.weight")});
  return units;
}

}  // namespace tandem::model
