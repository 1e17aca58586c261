#include "tandem/tokenizer/byte_level.h"

#include <array>

#include "tandem/core/utf8.h"

namespace tandem::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<std::int16_t, 324> byte_of{};  // code points used are all below 0x144
  Tables() {
    byte_of.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t c = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      char_of[b] = c;
      byte_of[c] = static_cast<std::int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_for_byte(std::uint8_t byte) { return tables().char_of[byte]; }

std::optional<std::uint8_t> byte_for_char(char32_t c) {
  if (c >= tables().byte_of.size() || tables().byte_of[c] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().byte_of[c]);
}

std::optional<std::string> to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    auto b0 = static_cast<unsigned char>(text[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      c = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three-byte and longer characters are never in the alphabet
    }
    auto b = byte_for_char(c);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

std::string from_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) core::utf8::append(out, char_for_byte(b));
  return out;
}

}  // namespace tandem::tokenizer::byte_level
