#include "tandem/io/token_sidecar.h"

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::io {
namespace {

TokenizeCursor cursor_of(const nlohmann::json& j, const std::string& where) {
  TANDEM_CHECK(j.is_object(), "{} must be an object {{input, line, offset}}", where);
  return {json_field<std::uint64_t>(j, "input", where), json_field<std::uint64_t>(j, "line", where),
          json_field<std::uint64_t>(j, "offset", where)};
}

}  // namespace

TokenSidecar parse_token_sidecar(std::string_view text, const std::string& where) {
  TokenSidecar s;
  s.json = parse_json(text, where);
  const nlohmann::json& j = s.json;
  TANDEM_CHECK(j.is_object(), "{}: expected a JSON object, got {}", where, json_excerpt(j));
  s.dtype = token_dtype_from_name(json_field<std::string>(j, "dtype", where));
  s.tokens = json_field<std::uint64_t>(j, "tokens", where);
  s.documents = json_field<std::uint64_t>(j, "documents", where);
  s.eos_id = json_field<std::uint64_t>(j, "eos_id", where);
  s.bytes = json_field<std::uint64_t>(j, "bytes", where);
  s.checksum = json_field<std::string>(j, "checksum", where);
  const std::size_t item = token_dtype_size(s.dtype);
  TANDEM_CHECK(s.tokens <= s.bytes && s.bytes / item == s.tokens && s.bytes % item == 0,
               "{}: bytes {} is not tokens {} x {} bytes ({})", where, s.bytes, s.tokens, item,
               token_dtype_name(s.dtype));
  TANDEM_CHECK(s.documents <= s.tokens, "{}: {} documents in {} tokens", where, s.documents,
               s.tokens);
  TANDEM_CHECK(item >= 8 || s.eos_id < (std::uint64_t{1} << (8 * item)),
               "{}: eos_id {} does not fit {}", where, s.eos_id, token_dtype_name(s.dtype));
  const std::string hex = s.checksum.size() == 22 && s.checksum.rfind("xxh64:", 0) == 0
                              ? s.checksum.substr(6)
                              : std::string();
  TANDEM_CHECK(
      hex.size() == 16 &&
          std::all_of(hex.begin(), hex.end(),
                      [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }),
      "{}: checksum '{}' is not core::xxh64:<16 hex digits>", where, s.checksum);
  if (j.contains("run_fingerprint"))
    s.run_fingerprint = json_field<std::string>(j, "run_fingerprint", where);
  if (j.contains("start")) s.start = cursor_of(j["start"], where + ": field 'start'");
  if (j.contains("end")) s.end = cursor_of(j["end"], where + ": field 'end'");
  return s;
}

}  // namespace tandem::io
