#include "tandem/data/repetition_filter.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::data {
namespace {

// One period's view of the padded array: position i < size is a token, beyond it the pad value
// (which the reference guarantees never equals a token).
class PaddedRows {
 public:
  PaddedRows(std::span<const std::int64_t> tokens, std::int64_t period)
      : tokens_(tokens), period_(period) {
    std::int64_t n = static_cast<std::int64_t>(tokens.size());
    padded_size_ = n + (period - n % period);
    rows_ = padded_size_ / period;
  }
  std::int64_t rows() const { return rows_; }
  // Element k of row r equals element k of the previous row (np.roll wraps row 0 to the last).
  bool equal_to_previous(std::int64_t row, std::int64_t k) const {
    std::int64_t prev = (row + rows_ - 1) % rows_;
    return same(row * period_ + k, prev * period_ + k);
  }
  bool row_equal_to_previous(std::int64_t row) const {
    for (std::int64_t k = 0; k < period_; ++k)
      if (!equal_to_previous(row, k)) return false;
    return true;
  }
  // find_end_first_consecutive_true: the number of leading true values of the row.
  std::int64_t leading_equal(std::int64_t row) const {
    std::int64_t k = 0;
    while (k < period_ && equal_to_previous(row, k)) ++k;
    return k;
  }
  // find_start_last_consecutive_true: start of the trailing run of true values, -1 if none.
  std::int64_t start_of_trailing_equal(std::int64_t row) const {
    std::int64_t t = 0;
    while (t < period_ && equal_to_previous(row, period_ - 1 - t)) ++t;
    return t > 0 ? period_ - t : -1;
  }

 private:
  bool same(std::int64_t a, std::int64_t b) const {
    std::int64_t n = static_cast<std::int64_t>(tokens_.size());
    bool pad_a = a >= n, pad_b = b >= n;
    if (pad_a || pad_b) return pad_a && pad_b;
    return tokens_[a] == tokens_[b];
  }
  std::span<const std::int64_t> tokens_;
  std::int64_t period_;
  std::int64_t padded_size_ = 0;
  std::int64_t rows_ = 0;
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python indexing of a row: -1 is the last row; past the end is an IndexError in the reference.
std::int64_t python_row(std::int64_t row, std::int64_t rows) {
  if (row < 0) row += rows;
  TANDEM_CHECK(row >= 0 && row < rows, "find_periodic_sequences: row index out of range");
  return row;
}

// Calls emit(Repetition) for each repetition of one period; emit returns false to stop.
template <typename Emit>
bool scan_period(std::span<const std::int64_t> tokens, std::int64_t period, Emit&& emit) {
  PaddedRows rows(tokens, period);
  std::int64_t r = 0;
  const std::int64_t n_rows = rows.rows();
  while (r < n_rows) {
    if (!rows.row_equal_to_previous(r)) {
      ++r;
      continue;
    }
    std::int64_t start_row = r;
    while (r + 1 < n_rows && rows.row_equal_to_previous(r + 1)) ++r;
    std::int64_t end_row = r;
    ++r;

    std::int64_t start_offset = rows.start_of_trailing_equal(python_row(start_row - 1, n_rows));
    start_offset = start_offset > 0 ? period - start_offset : 0;
    std::int64_t end_offset = rows.leading_equal(python_row(end_row + 1, n_rows));
    Repetition rep;
    rep.start = (start_row - 1) * period - start_offset;
    rep.end = (end_row + 1) * period + end_offset;
    rep.period = period;
    rep.times = floor_div(rep.end - rep.start, period);
    if (rep.times > 2 && !emit(rep)) return false;
  }
  return true;
}

template <typename Emit>
void scan(std::span<const std::int64_t> tokens, std::int64_t max_period, std::int64_t min_period,
          Emit&& emit) {
  for (std::int64_t v : tokens) TANDEM_CHECK(v != -1, "`mask_value` is in the array");
  max_period = std::min<std::int64_t>(max_period, static_cast<std::int64_t>(tokens.size()) / 3);
  for (std::int64_t p = min_period; p <= max_period; ++p) {
    TANDEM_CHECK(p > 0, "find_periodic_sequences: period must be positive, got {}", p);
    if (!scan_period(tokens, p, emit)) return;
  }
}

}  // namespace

std::vector<Repetition> find_periodic_sequences(std::span<const std::int64_t> tokens,
                                                std::int64_t max_period, std::int64_t min_period) {
  std::vector<Repetition> out;
  scan(tokens, max_period, min_period, [&](const Repetition& r) {
    out.push_back(r);
    return true;
  });
  return out;
}

bool is_rejected_by_repetition(std::span<const std::int64_t> tokens,
                               const RepetitionFilterConfig& config) {
  bool rejected = false;
  scan(tokens, config.max_period, config.min_period, [&](const Repetition& r) {
    rejected = r.times >= config.max_count;
    return !rejected;
  });
  return rejected;
}

}  // namespace tandem::data
