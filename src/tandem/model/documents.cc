#include "tandem/model/documents.h"

#include "tandem/core/error.h"

namespace tandem::model {

std::vector<std::int64_t> document_starts(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                          std::int64_t eos_token_id,
                                          std::optional<std::int64_t> bos_token_id) {
  TANDEM_CHECK(B >= 0 && T >= 0, "document_starts: bad sizes B={} T={}", B, T);
  std::vector<std::int64_t> starts(static_cast<std::size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t* row = ids + b * T;
    std::int64_t start = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      starts[b * T + t] = start;
      const bool ends =
          row[t] == eos_token_id && (!bos_token_id || (t + 1 < T && row[t + 1] == *bos_token_id));
      if (ends) start = t + 1;
    }
  }
  return starts;
}

std::vector<std::int64_t> document_lengths(const std::vector<std::int64_t>& doc_start,
                                           std::int64_t b, std::int64_t T) {
  TANDEM_CHECK(static_cast<std::int64_t>(doc_start.size()) >= (b + 1) * T,
               "document_lengths: row {} is outside {} starts of length {}", b, doc_start.size(),
               T);
  std::vector<std::int64_t> lengths;
  for (std::int64_t t = 0; t < T; ++t) {
    if (t == 0 || doc_start[b * T + t] != doc_start[b * T + t - 1]) lengths.push_back(0);
    ++lengths.back();
  }
  return lengths;
}

std::vector<std::int64_t> document_positions(const std::int64_t* doc_start, std::int64_t B,
                                             std::int64_t T) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(B * T));
  for (std::int64_t i = 0; i < B * T; ++i) {
    TANDEM_CHECK(doc_start[i] >= 0 && doc_start[i] <= i % T,
                 "doc_start {} of token {} is not a position at or before it", doc_start[i], i);
    positions[static_cast<std::size_t>(i)] = i % T - doc_start[i];
  }
  return positions;
}

}  // namespace tandem::model
