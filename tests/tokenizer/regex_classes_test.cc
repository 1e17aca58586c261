// The character classes of tokenizer.json regexes match the code points HF's engines put in them
// (Oniguruma for Split patterns, Rust regex for single_word), every code point, although PCRE2
// 10.42 has other \w and \s and Unicode 14 tables where HF has Unicode 16 (pcre_regex.h).
// Fixture: tools/make_tokenizer_fixtures.py regex (tokenizers 0.23.3).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/utf8.h"
#include "tandem/tokenizer/pcre_regex.h"
#include "test_data.h"

namespace tandem {
namespace {

const nlohmann::json& regex_fixture() {
  static const nlohmann::json j =
      nlohmann::json::parse(core::read_file(testing::tokenizer_fixture("regex_classes.json")));
  return j;
}

// One '1' (member) or '0' per code point of the block, surrogates skipped; `is_member` is given
// the block's text and each code point's byte offset and length in it.
template <typename F>
std::string membership(std::size_t block, F&& mark_members) {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (char32_t cp = block * 4096; cp < (block + 1) * 4096; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string u = core::utf8::encode(cp);
    spans.emplace_back(text.size(), u.size());
    text += u;
  }
  std::vector<char> member(text.size(), 0);  // by byte offset
  mark_members(text, spans, member);
  std::string bits;
  for (const auto& [offset, length] : spans) bits += member[offset] ? '1' : '0';
  return bits;
}

TEST(RegexClasses, SplitPatternClassesMatchOnigurumaOnEveryCodePoint) {
  const auto& atoms = regex_fixture()["oniguruma"];
  ASSERT_GE(atoms.size(), 25u);
  for (const auto& [atom, digests] : atoms.items()) {
    tokenizer::PcreRegex regex(atom);
    int bad_blocks = 0;
    for (std::size_t block = 0; block < digests.size(); ++block) {
      std::string bits =
          membership(block, [&](const std::string& text, const auto&, std::vector<char>& member) {
            regex.for_each_match(text, [&](std::size_t s, std::size_t e) {
              std::fill(member.begin() + s, member.begin() + e, 1);
            });
          });
      if (core::sha256_hex(bits).substr(0, 16) != digests[block].get<std::string>()) {
        if (++bad_blocks <= 3) {
          ADD_FAILURE() << atom << ": code points U+" << std::hex << block * 4096 << "..U+"
                        << (block + 1) * 4096 - 1 << " differ from HF's Oniguruma";
        }
      }
    }
    EXPECT_EQ(bad_blocks, 0) << atom;
  }
}

// single_word: an added token "qq" is kept unless a Rust-regex word character follows it.
TEST(RegexClasses, SingleWordBoundaryMatchesRustRegexOnEveryCodePoint) {
  nlohmann::json j = nlohmann::json::parse(
      core::read_file(testing::tokenizer_fixture("gpt2_style_tokenizer.json")));
  j["added_tokens"] = nlohmann::json::array(
      {testing::added_token_json(1500, "qq", {.single_word = true, .normalized = true})});
  auto tok = tokenizer::Tokenizer::from_json(j.dump(), "single_word_qq.json");
  tokenizer::Encoder encoder(tok);
  const auto& digests = regex_fixture()["rust_word"];
  ASSERT_EQ(digests.size(), 0x110000u / 4096);
  int bad_blocks = 0;
  for (std::size_t block = 0; block < digests.size(); ++block) {
    std::string bits;
    for (char32_t cp = block * 4096; cp < (block + 1) * 4096; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      auto ids = encoder.encode("qq" + core::utf8::encode(cp));
      bits += !ids.empty() && ids[0] == 1500 ? '0' : '1';
    }
    if (core::sha256_hex(bits).substr(0, 16) != digests[block].get<std::string>()) {
      if (++bad_blocks <= 3) {
        ADD_FAILURE() << "single_word: code points U+" << std::hex << block * 4096
                      << " block differs from HF's Rust regex \\w";
      }
    }
  }
  EXPECT_EQ(bad_blocks, 0);
}

TEST(RegexClasses, NegatedShorthandsInsideAClassAreRefused) {
  for (const char* p : {"[\\Sa]", "[\\Wa]", "[x\\D]"}) {
    EXPECT_THROW(tokenizer::PcreRegex regex(p), core::Error) << p;
  }
  // Outside a class they are fine, and so is a negated class of the positive ones.
  EXPECT_NO_THROW(tokenizer::PcreRegex regex("\\S+|\\W|\\D|[^\\s\\w\\d]"));
}

}  // namespace
}  // namespace tandem
