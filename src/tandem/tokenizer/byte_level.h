// GPT-2's byte-level alphabet: each byte 0..255 is shown as one printable Unicode character
// (printable Latin-1 bytes map to themselves, the rest to U+0100 onwards). Vocabulary keys of
// byte-level BPE tokenizers are written in this alphabet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::tokenizer::byte_level {

// The code point that stands for `byte`.
char32_t char_for_byte(std::uint8_t byte);
// The byte a code point stands for, or nullopt if the code point is not in the alphabet.
std::optional<std::uint8_t> byte_for_char(char32_t c);

// Decodes a string written in the alphabet back to raw bytes; nullopt if any character is
// outside the alphabet (or the string is not valid UTF-8).
std::optional<std::string> to_bytes(std::string_view alphabet_text);
// Writes raw bytes in the alphabet (UTF-8).
std::string from_bytes(std::string_view bytes);

}  // namespace tandem::tokenizer::byte_level
