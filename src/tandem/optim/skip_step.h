// The skip-step rule of OLMo-core's SkipStepOptimizer / SkipStepAdamW: an update is skipped when
// this step's loss or grad norm is more than sigma_factor standard deviations above the mean of
// the previous values in a rolling window.
//
// Exact semantics (olmo_core/optim/skip_step_optimizer.py):
// - every step's value is appended to its history BEFORE the decision (a skipped step's spike
//   stays in the window); the history keeps the last rolling_interval_length + 1 values;
// - the rule is active once the history, current value included, holds at least
//   max(2, rolling_interval_length / 2) values (64 of 128); before that nothing is skipped;
// - mean and std (unbiased, n - 1) are over the history WITHOUT the current value;
// - the step proceeds iff (x - mean) <= sigma_factor * std for the loss AND the grad norm (the
//   latter only when grad norms are given); otherwise it is skipped;
// - a skipped step leaves weights, moments and the Adam step count untouched
//   (step_increment_bugfix = true), so the caller simply does not call AdamW::step.
// Deliberate difference: a non-finite loss or grad norm is always skipped and is NOT recorded (in
// OLMo-core it would be recorded, make every later comparison false and so skip the next 128
// steps, and before activation it would be applied). Statistics are in double (OLMo-core: fp32).
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>

namespace tandem::optim {

struct SkipStepOptions {
  std::int64_t rolling_interval_length = 128;
  double sigma_factor = 6.0;
  void validate() const;
};

class SkipStepRule {
 public:
  explicit SkipStepRule(SkipStepOptions options = {});

  // Records this step's (pre-clip) loss and grad norm and says whether its update must be skipped.
  // Pass no grad norm when clipping is off (OLMo-core then tracks the loss only).
  bool observe(double loss, std::optional<double> grad_norm);

  std::int64_t skipped_steps() const { return skipped_; }
  const SkipStepOptions& options() const { return options_; }
  const std::deque<double>& losses() const { return losses_; }
  const std::deque<double>& grad_norms() const { return grad_norms_; }

  // Checkpoint state; from_json throws tandem::core::Error naming the bad field.
  nlohmann::json to_json() const;
  static SkipStepRule from_json(const nlohmann::json& state);

 private:
  void push(std::deque<double>& history, double value) const;
  bool is_spike(const std::deque<double>& history) const;

  SkipStepOptions options_;
  std::deque<double> losses_;
  std::deque<double> grad_norms_;
  std::int64_t skipped_ = 0;
};

}  // namespace tandem::optim
