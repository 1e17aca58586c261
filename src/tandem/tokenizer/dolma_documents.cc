#include "tandem/tokenizer/dolma_documents.h"

namespace tandem::tokenizer {
namespace {

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The code point of valid UTF-8 bytes text[begin, end).
char32_t decode(std::string_view text, std::size_t begin, std::size_t end) {
  const auto lead = static_cast<unsigned char>(text[begin]);
  const std::size_t n = end - begin;
  char32_t c = n == 1 ? lead : n == 2 ? (lead & 0x1Fu) : n == 3 ? (lead & 0x0Fu) : (lead & 0x07u);
  for (std::size_t i = begin + 1; i < end; ++i) c = (c << 6) | (text[i] & 0x3Fu);
  return c;
}

}  // namespace

std::string_view strip_python_whitespace(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t next = begin + 1;
    while (next < text.size() && is_continuation(static_cast<unsigned char>(text[next]))) ++next;
    if (!is_python_space(decode(text, begin, next))) break;
    begin = next;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && is_continuation(static_cast<unsigned char>(text[start]))) --start;
    if (!is_python_space(decode(text, start, end))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

void append_eos_like_dolma(std::vector<std::uint32_t>& ids, std::uint32_t eos) {
  if (ids.empty() || ids.back() != eos) ids.push_back(eos);
}

}  // namespace tandem::tokenizer
