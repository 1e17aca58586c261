#define PCRE2_CODE_UNIT_WIDTH 8
#include "tandem/tokenizer/pcre_regex.h"

#include <pcre2.h>

#include <fmt/format.h>

#include "tandem/core/error.h"

namespace tandem::tokenizer {
namespace {

// Unicode White_Space, which Oniguruma's \s matches in UTF-8 mode.
constexpr const char* kWhiteSpaceRanges =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

// Oniguruma's \w as measured in HF tokenizers (every code point,
// tests/tokenizer/regex_classes_test.cc): Alphabetic, marks, decimal digits, connector punctuation,
// and the Latin-1 digits it counts as word characters (superscripts two, three, one; the vulgar
// fractions).
constexpr const char* kOnigurumaWord =
    "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}";

struct AddedCodePoints {
  const char* category;
  char32_t first;
  char32_t last;
  bool removed;  // left `category` (it is listed again, added to its new one)
};

// PCRE2 10.42 has Unicode 14 tables; HF's regex engines Unicode 16. The code points assigned in
// between are added to the classes that should hold them.
constexpr AddedCodePoints kUnicodeAdditions[] = {
#include "tandem/tokenizer/unicode_additions.inc"
};

// The added code points of the general categories `name` stands for ("L", "Lu", "L&"), as class
// items ("\x{a}-\x{b}..."); empty for other property names (scripts, binary properties).
std::string added_ranges(std::string_view name, bool removed = false) {
  auto wanted = [&](std::string_view category) {
    if (name.size() == 1) return category[0] == name[0];
    if (name == "L&") return category == "Lu" || category == "Ll" || category == "Lt";
    return name.size() == 2 && category == name;
  };
  std::string out;
  for (const auto& a : kUnicodeAdditions) {
    if (a.removed != removed || !wanted(a.category)) continue;
    // A code point that moved within the named group (Mn -> Mc for "M") stays in it.
    if (removed && name.size() == 1) continue;
    out += fmt::format("\\x{{{:x}}}", static_cast<std::uint32_t>(a.first));
    if (a.last != a.first) out += fmt::format("-\\x{{{:x}}}", static_cast<std::uint32_t>(a.last));
  }
  return out;
}

std::string word_items() {
  return std::string(kOnigurumaWord) + added_ranges("L") + added_ranges("Nl") + added_ranges("M") +
         added_ranges("Nd") + added_ranges("Pc");
}

}  // namespace

std::string rewrite_for_hf_classes(const std::string& p) {
  std::string out;
  bool in_class = false;
  // A class shorthand: its items inside a class, or a class of them outside one; the negation
  // only outside (a negated set inside a class cannot be written as items).
  auto put_set = [&](const std::string& items, bool negated, char escape) {
    if (in_class) {
      TANDEM_CHECK(!negated, "regex {}: \\{} inside a character class is not supported", p, escape);
      out += items;
    } else {
      out += (negated ? "[^" : "[") + items + "]";
    }
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's' || n == 'S') {
        put_set(kWhiteSpaceRanges, n == 'S', n);
      } else if (n == 'w' || n == 'W') {
        put_set(word_items(), n == 'W', n);
      } else if (n == 'd' || n == 'D') {
        put_set("\\p{Nd}" + added_ranges("Nd"), n == 'D', n);
      } else if ((n == 'p' || n == 'P') && (i + 2 >= p.size() || p[i + 2] != '{')) {
        out += n;  // Oniguruma (Ruby syntax) reads \pL as the letters "pL", not as a property
      } else if (n == 'p' || n == 'P') {
        // \p{L}, \p{^L}, \P{L}: general categories get the added code points.
        const std::size_t end = p.find('}', i + 3);
        TANDEM_CHECK(end != std::string::npos, "regex {}: unterminated \\{}{{", p, n);
        std::string name = p.substr(i + 3, end - i - 3);
        bool negated = n == 'P';
        if (!name.empty() && name[0] == '^') {
          negated = !negated;
          name.erase(0, 1);
        }
        const std::string extra = added_ranges(name);
        const std::string removed = added_ranges(name, true);
        const std::string items = "\\p{" + name + "}" + extra;
        if (extra.empty() || (in_class && (negated || !removed.empty()))) {
          // Nothing to add; or inside a class a negated category or one that lost a code point,
          // which keep PCRE2's Unicode 14 meaning (docs/tokenizer.md).
          out.append(p, i, end + 1 - i);
        } else if (removed.empty()) {
          put_set(items, negated, n);
        } else if (!negated) {
          out += "(?:(?![" + removed + "])[" + items + "])";
        } else {
          out += "(?:[" + removed + "]|[^" + items + "])";
        }
        i = end;
        continue;
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
  std::string rewritten = rewrite_for_hf_classes(pattern);
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
