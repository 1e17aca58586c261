// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) with Oniguruma's meaning of \s, so
// the regexes in HF tokenizer.json files (compiled by Oniguruma in HF tokenizers) match the same.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace tandem::tokenizer {

class PcreRegex {
 public:
  // Throws tandem::core::Error with PCRE2's message and the offset in the pattern.
  explicit PcreRegex(const std::string& pattern);
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  // Calls on_match(start, end) for each successive non-empty, non-overlapping match in `text`
  // (which must be valid UTF-8). Empty matches are skipped as HF's splitting drops them.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const;

  const std::string& pattern() const { return pattern_; }

  // Per-thread match state; one per thread using the regex.
  class Matcher {
   public:
    explicit Matcher(const PcreRegex& regex);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;
    // First match at or after `start`; returns false when there is none.
    bool find(std::string_view text, std::size_t start, std::size_t* match_start,
              std::size_t* match_end);

   private:
    const PcreRegex& regex_;
    pcre2_real_match_data_8* data_;
  };

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// Rewrites a pattern written for HF tokenizers' Oniguruma so that PCRE2 matches the same
// characters: \s/\S as Unicode White_Space (PCRE2's \s also has U+180E), \w/\W as Oniguruma's
// word characters (PCRE2's lack the marks), \d/\D and the general categories (\p{L}, \pN, \p{Lu},
// \P{..}, \p{^..}) with the code points Unicode 15.0-16.0 assigned, which PCRE2 10.42's Unicode 14
// tables lack. Throws for \S, \W, \D inside a character class.
std::string rewrite_for_hf_classes(const std::string& pattern);

template <typename F>
void PcreRegex::for_each_match(std::string_view text, F&& on_match) const {
  Matcher m(*this);
  std::size_t pos = 0, s, e;
  while (pos <= text.size() && m.find(text, pos, &s, &e)) {
    if (e > s) {
      on_match(s, e);
      pos = e;
    } else {
      pos = e + 1;  // empty match: step one character on (valid UTF-8 assumed)
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace tandem::tokenizer
