#include "tandem/model/recompute.h"

#include "tandem/core/error.h"

namespace tandem::model {

Recompute parse_recompute(const std::string& value, const std::string& where) {
  if (value == "none") return Recompute::kNone;
  if (value == "full") return Recompute::kFull;
  if (value == "selective") return Recompute::kSelective;
  core::fail("{}: unknown recompute policy '{}' (expected none, full or selective)", where, value);
}

const char* recompute_name(Recompute policy) {
  switch (policy) {
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kNone:
      break;
  }
  return "none";
}

}  // namespace tandem::model
