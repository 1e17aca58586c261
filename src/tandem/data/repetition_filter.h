// OLMo-core's instance filter: find_periodic_sequences (olmo_core.data.utils) reimplemented with
// the same answer on every input, edge cases included. Per period p the reference pads the array
// with -1 to a multiple of p (always at least one pad value), views it as rows of p, compares each
// row with the previous one (np.roll: row 0 with the last, padded row), groups runs of equal rows,
// widens each run by the partial matches of its neighbouring rows and reports it if it repeats
// more than twice. max_period is clamped to len // 3.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::data {

struct Repetition {
  std::int64_t start = 0;
  std::int64_t end = 0;  // exclusive
  std::int64_t period = 0;
  std::int64_t times = 0;
  bool operator==(const Repetition&) const = default;
};

struct RepetitionFilterConfig {
  std::int64_t max_period = 13;  // OLMo-core InstanceFilterConfig defaults
  std::int64_t min_period = 1;
  std::int64_t max_count = 32;
};

// Every repetition the reference yields, in its order (by period, then by position).
std::vector<Repetition> find_periodic_sequences(std::span<const std::int64_t> tokens,
                                                std::int64_t max_period,
                                                std::int64_t min_period = 1);

// True when the instance must be rejected (some repetition with times >= max_count). Stops at
// the first such repetition.
bool is_rejected_by_repetition(std::span<const std::int64_t> tokens,
                               const RepetitionFilterConfig& config);

}  // namespace tandem::data
