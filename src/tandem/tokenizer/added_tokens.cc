#include "tandem/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/tokenizer/pcre_regex.h"

namespace tandem::tokenizer {
namespace {

// Rust's char::is_whitespace (Unicode White_Space), on the code point that ends/starts at `i`.
bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

char32_t decode_at(std::string_view s, std::size_t i, std::size_t* len) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  std::size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
  char32_t c = b & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
    c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return c;
}

// Start of the code point that ends right before `end`.
std::size_t previous_char_start(std::string_view s, std::size_t end) {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Rust regex's \w (Unicode word character) for one code point. \p{L} and \p{Nl} (already in
// Alphabetic) make PcreRegex add the letters newer than PCRE2's tables (pcre_regex.h).
bool is_word_char(std::string_view s, std::size_t i) {
  static const PcreRegex word(
      "^[\\p{Alphabetic}\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}]");
  std::size_t len;
  decode_at(s, i, &len);
  PcreRegex::Matcher m(word);
  std::size_t a, b;
  return m.find(s.substr(i, len), 0, &a, &b);
}

}  // namespace

AddedVocabulary::AddedVocabulary(const nlohmann::json& added, const std::string& source,
                                 const Normalizer* normalizer, const BpeModel& model) {
  const std::uint64_t model_entries = model.vocab_entries();
  if (added.is_null()) return;
  std::unordered_map<std::string, std::uint32_t> id_of_content;
  std::optional<std::uint32_t> max_id;
  TANDEM_CHECK(added.is_array(), "{}: added_tokens is not an array", source);
  for (std::size_t i = 0; i < added.size(); ++i) {
    const nlohmann::json& t = added[i];
    const std::string where = fmt::format("{}: added_tokens[{}]", source, i);
    TANDEM_CHECK(t.is_object(), "{} is not an object: {}", where, io::json_excerpt(t));
    auto flag = [&](const char* key, bool fallback) {
      return t.contains(key) && !t[key].is_null() ? io::json_field<bool>(t, key, where) : fallback;
    };
    AddedToken token;
    // json_as refuses ids past 32 bits (nlohmann's get<uint32_t> would wrap them).
    io::json_field<std::uint32_t>(t, "id", where);  // must be there and valid; HF then ignores it
    token.content = io::json_field<std::string>(t, "content", where);
    TANDEM_CHECK(!token.content.empty(), "{}: added token {} has empty content", source, i);
    if (auto known = id_of_content.find(token.content); known != id_of_content.end()) {
      token.id = known->second;
    } else if (auto in_model = model.key_to_id(token.content)) {
      token.id = *in_model;
    } else if (max_id && (*max_id >= model_entries || model_entries == 0)) {
      TANDEM_CHECK(*max_id < kMaxTokenId, "{}: added token ids run past 32 bits", source);
      token.id = *max_id + 1;
    } else {
      token.id = static_cast<std::uint32_t>(model_entries);
    }
    id_of_content[token.content] = token.id;
    max_id = std::max(max_id.value_or(0), token.id);
    token.single_word = flag("single_word", false);
    token.lstrip = flag("lstrip", false);
    token.rstrip = flag("rstrip", false);
    token.special = flag("special", false);
    token.normalized = flag("normalized", !token.special);
    token.match_text = token.content;
    if (token.normalized && normalizer) {
      std::string buffer;
      token.match_text = std::string(normalizer->apply(token.content, buffer));
    }
    tokens_.push_back(std::move(token));
  }
  build(plain_, false);
  build(normalized_, true);
}

void AddedVocabulary::build(MatchSet& set, bool normalized) {
  for (std::uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].normalized != normalized) continue;
    auto first = static_cast<unsigned char>(tokens_[i].match_text[0]);
    auto& bucket = set.by_first_byte[first];
    // Same text twice: HF's map keeps one entry; keep the first seen.
    bool duplicate = std::any_of(bucket.begin(), bucket.end(), [&](std::uint32_t j) {
      return tokens_[j].match_text == tokens_[i].match_text;
    });
    if (!duplicate) bucket.push_back(i);
    set.any = true;
  }
  for (auto& bucket : set.by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::uint32_t a, std::uint32_t b) {
      return tokens_[a].match_text.size() > tokens_[b].match_text.size();
    });
  }
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return &t;
  return nullptr;
}

void AddedVocabulary::find_matches(std::string_view text, std::size_t begin, std::size_t end,
                                   const MatchSet& set, bool encode_special_tokens,
                                   std::vector<TextPiece>& out) const {
  if (!set.any) {
    out.push_back({begin, end, std::nullopt});
    return;
  }
  const std::string_view sentence = text.substr(begin, end - begin);
  const std::size_t n = sentence.size();
  std::size_t start_offset = 0;
  std::size_t pos = 0;
  while (pos < n) {
    // Leftmost-longest: the first position where some token matches, the longest there.
    const AddedToken* match = nullptr;
    for (; pos < n; ++pos) {
      const auto& bucket = set.by_first_byte[static_cast<unsigned char>(sentence[pos])];
      for (std::uint32_t i : bucket) {
        const std::string& c = tokens_[i].match_text;
        if (c.size() <= n - pos && std::memcmp(sentence.data() + pos, c.data(), c.size()) == 0) {
          match = &tokens_[i];
          break;
        }
      }
      if (match) break;
    }
    if (!match) break;
    std::size_t start = pos, stop = pos + match->match_text.size();
    pos = stop;  // the search resumes after the token itself, as the trie iterator does
    if (encode_special_tokens && match->special) continue;  // its text stays plain, as HF's
    if (match->single_word) {
      bool start_space =
          start == 0 || !is_word_char(sentence, previous_char_start(sentence, start));
      bool stop_space = stop == n || !is_word_char(sentence, stop);
      if (!start_space || !stop_space) continue;
    }
    if (match->lstrip) {
      std::size_t new_start = start;
      while (new_start > 0) {
        std::size_t p = previous_char_start(sentence, new_start), len;
        if (!is_white_space(decode_at(sentence, p, &len))) break;
        new_start = p;
      }
      start = std::max(new_start, start_offset);
    }
    if (match->rstrip) {
      while (stop < n) {
        std::size_t len;
        if (!is_white_space(decode_at(sentence, stop, &len))) break;
        stop += len;
      }
    }
    // An lstrip match whose start moved onto its end (the previous match's rstrip already took
    // the token's text) is an empty piece, which HF drops: no token. (Moved past its end, HF
    // panics with "AddedVocabulary bad split"; tandem drops that match as well.)
    if (start >= stop) continue;
    if (start_offset < start) out.push_back({begin + start_offset, begin + start, std::nullopt});
    out.push_back({begin + start, begin + stop, match->id});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({begin + start_offset, begin + n, std::nullopt});
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<TextPiece>& out,
                            bool encode_special_tokens) const {
  out.clear();
  if (text.empty()) return;
  find_matches(text, 0, text.size(), normalized ? normalized_ : plain_, encode_special_tokens, out);
}

}  // namespace tandem::tokenizer
