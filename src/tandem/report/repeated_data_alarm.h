// The repeated-data alarm: the signature of the MaxText double-sharding bug (OLMO3_FACTS.md
// section 7) is a training loss that falls below where it should be while held-out loss does not
// improve with it, i.e. a generalisation gap that opens up. Two bases:
//  - against a reference (when both have train/loss and the held-out set): at each held-out
//    point of the run inside the reference's range,
//      train_gap   = ref train/loss - run train/loss    (smoothed: mean of the last 5 points)
//      heldout_gap = ref eval loss  - run eval loss
//    alarm when train_gap > threshold and train_gap - heldout_gap > threshold;
//  - against itself (no reference train/loss): gap_i = eval loss_i - train/loss_i at each
//    held-out point; alarm when gap_i - gap_0 > threshold while held-out loss has not improved
//    by min_improvement over its best earlier value.
// Each instance is seen once per epoch on clean data, so the training loss is itself an
// estimate of loss on unseen data and neither gap should grow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/report/curves.h"

namespace tandem::report {

struct AlarmOptions {
  double threshold = 0.1;         // nats
  double min_improvement = 0.01;  // held-out improvement that counts (self basis)
  int smooth = 5;                 // train/loss points averaged at each held-out point
};

struct AlarmFinding {
  std::string heldout;  // e.g. "eval/c4/loss"
  std::string basis;    // "reference" or "self"
  double tokens = 0.0;
  double train_gap = 0.0;    // how far train loss fell below its expectation
  double heldout_gap = 0.0;  // how far held-out loss moved the same way
};

struct AlarmResult {
  bool triggered = false;
  std::vector<AlarmFinding> findings;  // all points that met the signature
  std::vector<std::string> notes;      // what could not be checked and why
  std::optional<std::uint64_t> duplicate_groups, duplicate_instances;  // from audit.json
};

AlarmResult check_repeated_data(const Curves& run, const Curves* reference,
                                const AlarmOptions& options);
// Reads duplicate_groups / duplicate_instances from <run>/audit.json when present.
void attach_audit_counts(const std::string& run_dir, AlarmResult& result);

}  // namespace tandem::report
