#define PCRE2_CODE_UNIT_WIDTH 8
#include "tandem/tokenizer/pcre_regex.h"

#include <pcre2.h>

#include "tandem/core/error.h"

namespace tandem::tokenizer {
namespace {

// Unicode White_Space, which Oniguruma's \s matches in UTF-8 mode.
constexpr const char* kWhiteSpaceRanges =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

}  // namespace

std::string rewrite_whitespace_classes(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's') {
        out +=
            in_class ? std::string(kWhiteSpaceRanges) : "[" + std::string(kWhiteSpaceRanges) + "]";
      } else if (n == 'S') {
        TANDEM_CHECK(!in_class, "regex {}: \\S inside a character class is not supported", p);
        out += "[^" + std::string(kWhiteSpaceRanges) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

PcreRegex::PcreRegex(const std::string& pattern) : pattern_(pattern) {
  std::string rewritten = rewrite_whitespace_classes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error_code, &error_offset,
                        nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    core::fail("cannot compile regex {:?} at offset {}: {}", pattern, error_offset,
               reinterpret_cast<const char*>(message));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

PcreRegex::~PcreRegex() {
  if (code_) pcre2_code_free(code_);
}

PcreRegex::Matcher::Matcher(const PcreRegex& regex)
    : regex_(regex), data_(pcre2_match_data_create_from_pattern(regex.code_, nullptr)) {
  TANDEM_CHECK(data_ != nullptr, "out of memory creating PCRE2 match data");
}

PcreRegex::Matcher::~Matcher() { pcre2_match_data_free(data_); }

bool PcreRegex::Matcher::find(std::string_view text, std::size_t start, std::size_t* match_start,
                              std::size_t* match_end) {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = regex_.jit_
               ? pcre2_jit_match(regex_.code_, subject, text.size(), start, 0, data_, nullptr)
               : pcre2_match(regex_.code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data_,
                             nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    core::fail("regex {:?} failed: {}", regex_.pattern_, reinterpret_cast<const char*>(message));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
  *match_start = ov[0];
  *match_end = ov[1];
  return true;
}

}  // namespace tandem::tokenizer
