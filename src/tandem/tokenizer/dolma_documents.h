// How dolma's `dolma tokens` (the tool AI2 tokenizes OLMo's data with) turns a document's text
// into ids, where it differs from encoding the raw text: it encodes the text stripped of
// leading and trailing whitespace (Python's str.strip), skips a document that is empty once
// stripped, and appends EOS only when the ids do not already end with it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tandem::tokenizer {

// `text` without leading and trailing whitespace as Python's str.isspace() defines it (ASCII
// \t\n\v\f\r, U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000). `text` must be valid UTF-8.
std::string_view strip_python_whitespace(std::string_view text);

// Appends `eos` unless `ids` already ends with it (dolma's Tokenizer.add_special_tokens; ids are
// never empty for a non-empty stripped text).
void append_eos_like_dolma(std::vector<std::uint32_t>& ids, std::uint32_t eos);

}  // namespace tandem::tokenizer
