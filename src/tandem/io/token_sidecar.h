// The sidecar JSON beside a token file (part-00000.npy + part-00000.json), parsed and checked:
// what `data tokenize` resumes from and `data inspect` reports.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/io/token_file.h"

namespace tandem::io {

// Where a tokenize part starts or ends: document (input, line), of which `offset` tokens are in
// earlier parts.
struct TokenizeCursor {
  std::uint64_t input = 0;
  std::uint64_t line = 0;
  std::uint64_t offset = 0;
};

struct TokenSidecar {
  TokenDtype dtype = TokenDtype::kU32;
  std::uint64_t tokens = 0;
  std::uint64_t documents = 0;
  std::uint64_t eos_id = 0;
  std::uint64_t bytes = 0;
  std::string checksum;         // "xxh64:<16 hex>"
  std::string run_fingerprint;  // "" when absent
  std::optional<TokenizeCursor> start, end;
  nlohmann::json json;  // the whole object, for reports
};

// Errors name `where` and the key: not strict JSON, an unknown dtype, a count that is not a
// non-negative integer, bytes != tokens x item size, more documents than tokens, an eos_id the
// dtype cannot hold, a malformed checksum or cursor.
TokenSidecar parse_token_sidecar(std::string_view text, const std::string& where);

}  // namespace tandem::io
