// UTF-8 helpers: strict validation (as Rust's str accepts it) and lossy decoding (as Rust's
// String::from_utf8_lossy produces it, one U+FFFD per maximal invalid subsequence).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::core::utf8 {

// Byte offset of the first invalid sequence, or text.size() when the whole text is valid UTF-8
// (no surrogates, no overlongs, nothing above U+10FFFF).
std::size_t first_invalid(std::string_view text);
inline bool is_valid(std::string_view text) { return first_invalid(text) == text.size(); }

// Replaces each maximal invalid subsequence with U+FFFD.
std::string decode_lossy(std::string_view bytes);

// Appends the UTF-8 encoding of code point `c` (at most U+10FFFF; surrogates are not checked).
void append(std::string& out, char32_t c);
inline std::string encode(char32_t c) {
  std::string s;
  append(s, c);
  return s;
}

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline std::size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace tandem::core::utf8
