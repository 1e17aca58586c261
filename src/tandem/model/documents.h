// Document boundaries inside packed instances, as OLMo-core finds them for intra-document masking
// (data/utils.py get_document_lengths, used when a dataset has generate_doc_lengths): a document
// ends with an EOS token (inclusive), or, when a BOS id is given, wherever EOS is directly followed
// by BOS; the rest of the row after the last boundary is one more document.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::model {

// doc_start[b * T + t]: the position in row b where token t's document begins (what the model's
// and attention kernel's doc_start arguments take).
std::vector<std::int64_t> document_starts(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                          std::int64_t eos_token_id,
                                          std::optional<std::int64_t> bos_token_id = std::nullopt);

// RoPE positions under intra-document masking: each token's offset from its document's start.
std::vector<std::int64_t> document_positions(const std::int64_t* doc_start, std::int64_t B,
                                             std::int64_t T);

// The lengths of row b's documents, in order (OLMo-core's doc_lens for that instance).
std::vector<std::int64_t> document_lengths(const std::vector<std::int64_t>& doc_start,
                                           std::int64_t b, std::int64_t T);

}  // namespace tandem::model
