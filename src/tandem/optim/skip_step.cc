#include "tandem/optim/skip_step.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem::optim {

void SkipStepOptions::validate() const {
  TANDEM_CHECK(rolling_interval_length >= 2,
               "skip-step: rolling_interval_length must be >= 2, got {}", rolling_interval_length);
  TANDEM_CHECK(sigma_factor > 0.0 && std::isfinite(sigma_factor),
               "skip-step: sigma_factor must be > 0, got {}", sigma_factor);
}

SkipStepRule::SkipStepRule(SkipStepOptions options) : options_(options) { options_.validate(); }

void SkipStepRule::push(std::deque<double>& history, double value) const {
  history.push_back(value);
  while (static_cast<std::int64_t>(history.size()) > options_.rolling_interval_length + 1)
    history.pop_front();
}

bool SkipStepRule::is_spike(const std::deque<double>& history) const {
  // Statistics over every value but the last (the current one).
  const std::size_t n = history.size() - 1;
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += history[i];
  const double mean = sum / static_cast<double>(n);
  double squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) squares += (history[i] - mean) * (history[i] - mean);
  // Unbiased, as torch.std_mean; with one previous value it is NaN and, as in OLMo-core, every
  // comparison with it fails, so the step is skipped.
  const double std = std::sqrt(squares / static_cast<double>(n - 1));
  return !((history.back() - mean) <= options_.sigma_factor * std);
}

bool SkipStepRule::observe(double loss, std::optional<double> grad_norm) {
  if (!std::isfinite(loss) || (grad_norm && !std::isfinite(*grad_norm))) {
    ++skipped_;
    return true;
  }
  push(losses_, loss);
  if (grad_norm) push(grad_norms_, *grad_norm);
  const auto active_after = std::max<std::int64_t>(2, options_.rolling_interval_length / 2);
  if (static_cast<std::int64_t>(losses_.size()) < active_after) return false;
  bool skip = is_spike(losses_);
  if (grad_norm && grad_norms_.size() >= 2) skip = skip || is_spike(grad_norms_);
  if (skip) ++skipped_;
  return skip;
}

nlohmann::json SkipStepRule::to_json() const {
  return {{"rolling_interval_length", options_.rolling_interval_length},
          {"sigma_factor", options_.sigma_factor},
          {"losses", std::vector<double>(losses_.begin(), losses_.end())},
          {"grad_norms", std::vector<double>(grad_norms_.begin(), grad_norms_.end())},
          {"skipped_steps", skipped_}};
}

namespace {

const nlohmann::json& field(const nlohmann::json& state, const char* key) {
  TANDEM_CHECK(state.is_object(), "skip-step state: expected a JSON object");
  auto it = state.find(key);
  TANDEM_CHECK(it != state.end(), "skip-step state: missing field '{}'", key);
  return *it;
}

std::deque<double> number_list(const nlohmann::json& state, const char* key, std::int64_t max_len) {
  const nlohmann::json& list = field(state, key);
  TANDEM_CHECK(list.is_array(), "skip-step state: field '{}' must be a list of numbers", key);
  TANDEM_CHECK(static_cast<std::int64_t>(list.size()) <= max_len,
               "skip-step state: field '{}' holds {} values, more than the window allows ({})", key,
               list.size(), max_len);
  std::deque<double> out;
  for (const auto& v : list) {
    TANDEM_CHECK(v.is_number(), "skip-step state: field '{}' must be a list of numbers", key);
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

SkipStepRule SkipStepRule::from_json(const nlohmann::json& state) {
  const auto& length = field(state, "rolling_interval_length");
  const auto& sigma = field(state, "sigma_factor");
  const auto& skipped = field(state, "skipped_steps");
  TANDEM_CHECK(length.is_number_integer(),
               "skip-step state: field 'rolling_interval_length' must be an integer");
  TANDEM_CHECK(sigma.is_number(), "skip-step state: field 'sigma_factor' must be a number");
  TANDEM_CHECK(skipped.is_number_integer() && skipped.get<std::int64_t>() >= 0,
               "skip-step state: field 'skipped_steps' must be a non-negative integer");
  SkipStepRule rule({length.get<std::int64_t>(), sigma.get<double>()});
  rule.losses_ = number_list(state, "losses", rule.options_.rolling_interval_length + 1);
  rule.grad_norms_ = number_list(state, "grad_norms", rule.options_.rolling_interval_length + 1);
  rule.skipped_ = skipped.get<std::int64_t>();
  return rule;
}

}  // namespace tandem::optim
