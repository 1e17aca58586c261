#include "tandem/dist/dist_config.h"

#include "tandem/core/error.h"

namespace tandem::dist {

DistConfig read_dist_config(io::ConfigSection s) {
  DistConfig c;
  const std::string strategy = s.get_string("strategy", "ddp");
  if (strategy == "ddp") {
    c.strategy = Strategy::kDdp;
  } else if (strategy == "zero1") {
    c.strategy = Strategy::kZero1;
  } else {
    core::fail("{}: unknown strategy '{}' (expected ddp or zero1)", s.where("strategy"), strategy);
  }
  s.finish();
  return c;
}

const char* strategy_name(Strategy strategy) {
  return strategy == Strategy::kZero1 ? "zero1" : "ddp";
}

}  // namespace tandem::dist
