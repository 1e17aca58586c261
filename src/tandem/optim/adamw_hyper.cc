// AdamW's hyper-parameter check, apart from the optimiser itself: reading a config needs it,
// the compute backend that adamw.cc drives does not (the fuzz targets link this file alone).
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/optim/adamw.h"

namespace tandem::optim {

void AdamWHyper::validate() const {
  TANDEM_CHECK(beta1 >= 0.0 && beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got {}", beta1);
  TANDEM_CHECK(beta2 >= 0.0 && beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got {}", beta2);
  TANDEM_CHECK(eps >= 0.0 && std::isfinite(eps), "AdamW: eps must be >= 0, got {}", eps);
  TANDEM_CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
               "AdamW: weight_decay must be >= 0, got {}", weight_decay);
}

}  // namespace tandem::optim
