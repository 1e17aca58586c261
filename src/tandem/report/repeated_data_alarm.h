// The repeated-data alarm: the signature of the MaxText double-sharding bug (OLMO3_FACTS.md
// section 7) is a training loss that falls below where it should be while held-out loss does not
// fall with it. Each instance is seen once per epoch on clean data, so the training loss is an
// estimate of the loss on unseen data: on clean data, what training loss gains, held-out loss
// gains too.
//
// The rule, and how it accounts for noise:
//  - Training loss at the tokens of a held-out point: a local linear fit over the `window`
//    nearest training points (no lag on a falling curve, unlike a trailing mean), with its
//    standard error sigma * sqrt(1/k + (t - mean t)^2 / S_tt).
//  - sigma, the step-to-step noise of the training loss, from the curve itself: the median
//    absolute deviation of its second differences (a line has none), scaled to a normal sigma.
//  - Held-out losses are measured on fixed sets, so their changes carry no sampling noise.
//  - Two bases per held-out set:
//      reference (a reference with train/loss and the set):
//        train_gap   = ref train estimate - run train estimate
//        heldout_gap = ref held-out - run held-out       (reference interpolated in tokens)
//        excess      = train_gap - heldout_gap, noise se = sqrt(se_run^2 + se_ref^2)
//      self (otherwise): against the set's first evaluated point b,
//        train_gap   = run train(b) - run train(t)      (what training loss gained since b)
//        heldout_gap = run held-out(b) - run held-out(t)
//        excess      = train_gap - heldout_gap, noise se = sqrt(se_b^2 + se_t^2)
//  - A point alarms when train_gap and excess both exceed threshold + z * se, z the one-sided
//    normal quantile at alpha / n (Bonferroni over the n points tested in the comparison): more
//    evaluations do not mean more false alarms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/report/curves.h"

namespace tandem::report {

struct AlarmOptions {
  double threshold = 0.1;  // nats beyond the noise allowance
  double alpha = 0.01;     // false-alarm probability over all points of a comparison
  int window = 9;          // training-loss points in each local linear fit
};

// One held-out point checked.
struct AlarmPoint {
  double tokens = 0.0;
  double train_gap = 0.0;    // how far training loss fell below its expectation
  double heldout_gap = 0.0;  // how far held-out loss moved the same way
  double excess = 0.0;       // train_gap - heldout_gap
  double allowance = 0.0;    // threshold + z * se
  bool alarm = false;
};

struct AlarmCheck {
  std::string heldout;  // e.g. "eval/c4/loss"
  std::string basis;    // "reference" or "self"
  double sigma = 0.0;   // training-loss noise (run; the reference's combined in se)
  std::vector<AlarmPoint> points;
};

struct AlarmFinding {
  std::string heldout;
  std::string basis;
  double tokens = 0.0;
  double train_gap = 0.0;
  double heldout_gap = 0.0;
  double allowance = 0.0;
};

struct AlarmResult {
  bool triggered = false;
  double threshold = 0.0, alpha = 0.0;  // the options used
  double z = 0.0;                       // the Bonferroni quantile used
  std::int64_t tests = 0;               // points tested
  std::vector<AlarmCheck> checks;
  std::vector<AlarmFinding> findings;  // the points that alarmed
  std::vector<std::string> notes;      // what could not be checked and why
  std::optional<std::uint64_t> duplicate_groups, duplicate_instances;  // from audit.json
};

AlarmResult check_repeated_data(const Curves& run, const Curves* reference,
                                const AlarmOptions& options);
// Reads duplicate_groups / duplicate_instances from <run>/audit.json when present.
void attach_audit_counts(const std::string& run_dir, AlarmResult& result);

// The pieces, for tests:
// Robust step-to-step noise of a curve (NaN with fewer than 5 points).
double curve_noise(const std::vector<Point>& curve);
struct LocalFit {
  double value = 0.0;
  double se_factor = 0.0;  // standard error / sigma
};
// Local linear fit of the `window` points nearest `tokens`; nullopt with fewer than 3 points or
// when `tokens` lies outside the curve's range.
std::optional<LocalFit> local_linear_fit(const std::vector<Point>& curve, double tokens,
                                         int window);
// z with P(Z > z) = p for a standard normal Z.
double normal_quantile_upper(double p);

}  // namespace tandem::report
