// The Unicode normalizers of tokenizer.json against HF tokenizers' (tokenizers 0.23.3, whose
// tables are Unicode 9.0): every code point in every form, seeded random strings of combining
// marks, decomposable and Hangul characters, and a Sequence. Fixture:
// tools/make_tokenizer_fixtures.py unicode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/utf8.h"
#include "tandem/io/text_inputs.h"
#include "tandem/tokenizer/normalizer.h"
#include "test_data.h"

namespace tandem {
namespace {

using tokenizer::Normalizer;

const nlohmann::json& normalization_fixture() {
  static const nlohmann::json j = [] {
    auto source = io::open_byte_source(testing::tokenizer_fixture("unicode_normalization.json.gz"));
    return nlohmann::json::parse(io::read_all(*source));
  }();
  return j;
}

std::unique_ptr<const Normalizer> normalizer_form(const std::string& name) {
  return Normalizer::from_json(nlohmann::json{{"type", name}}, "test");
}

TEST(UnicodeNormalization, EveryCodePointMatchesHfInEveryForm) {
  const auto& blocks = normalization_fixture()["blocks"];
  for (const char* name : {"NFC", "NFD", "NFKC", "NFKD"}) {
    auto n = normalizer_form(name);
    const auto& expected = blocks[name];
    ASSERT_EQ(expected.size(), 0x110000u / 4096);
    int bad_blocks = 0;
    std::string buffer, data;
    for (std::size_t block = 0; block < expected.size(); ++block) {
      data.clear();
      for (char32_t cp = block * 4096; cp < (block + 1) * 4096; ++cp) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        data += n->apply(core::utf8::encode(cp), buffer);
        data += '\0';
      }
      if (core::sha256_hex(data).substr(0, 16) != expected[block].get<std::string>()) {
        ++bad_blocks;
        ADD_FAILURE() << name << ": code points U+" << std::hex << block * 4096 << "..U+"
                      << (block + 1) * 4096 - 1 << " normalize differently from HF";
      }
    }
    EXPECT_EQ(bad_blocks, 0) << name;
  }
}

TEST(UnicodeNormalization, RandomStringsMatchHfInEveryForm) {
  const auto& cases = normalization_fixture()["cases"];
  ASSERT_GE(cases.size(), 2000u);
  for (const char* name : {"NFC", "NFD", "NFKC", "NFKD"}) {
    auto n = normalizer_form(name);
    int mismatches = 0, changed = 0;
    std::string buffer;
    for (const auto& c : cases) {
      const std::string text = c["text"].get<std::string>();
      const std::string expected = c[name].get<std::string>();
      if (n->apply(text, buffer) != expected) {
        if (++mismatches <= 5) {
          ADD_FAILURE() << name << " of " << nlohmann::json(text).dump() << " differs from HF's "
                        << nlohmann::json(expected).dump();
        }
      }
      changed += expected != text;
    }
    EXPECT_EQ(mismatches, 0) << name;
    EXPECT_GE(changed, 400) << name << ": too few strings change; the check would be weak";
  }
}

TEST(UnicodeNormalization, SequenceAppliesEachFormInTurn) {
  auto n = Normalizer::from_json(nlohmann::json::parse(
                                     R"({"type": "Sequence", "normalizers": [
                                         {"type": "NFD"}, {"type": "NFKC"}]})"),
                                 "test");
  EXPECT_EQ(n->description(), "Sequence[NFD, NFKC]");
  std::string buffer;
  int checked = 0;
  for (const auto& pair : normalization_fixture()["sequence_nfd_nfkc"]) {
    EXPECT_EQ(n->apply(pair[0].get<std::string>(), buffer), pair[1].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 300);
}

// HF's Unicode 9.0 tables do not know the characters added later: U+11935 U+11930 (Dives Akuru,
// Unicode 13) stay two characters where Unicode 13's NFC composes them into U+11938, and a mark
// of Unicode 10 (U+1DF6, class 232) is not reordered before U+0301 (class 230).
TEST(UnicodeNormalization, CharactersNewerThanHfsTablesAreLeftAlone) {
  auto nfc = normalizer_form("NFC");
  std::string buffer;
  const std::string dives = core::utf8::encode(0x11935) + core::utf8::encode(0x11930);
  EXPECT_EQ(nfc->apply(dives, buffer), dives);
  const std::string marks = "e" + core::utf8::encode(0x1DF6) + core::utf8::encode(0x0301);
  EXPECT_EQ(nfc->apply(marks, buffer), marks);
  // The Unicode 9.0 ones are normalized: e + U+0301 composes.
  EXPECT_EQ(nfc->apply("e\xCC\x81", buffer), "\xC3\xA9");
  // Already normalized text comes back as the same view, without a copy.
  const std::string ascii = "plain text";
  EXPECT_EQ(nfc->apply(ascii, buffer).data(), ascii.data());
}

TEST(UnicodeNormalization, UnsupportedNormalizersAreRefused) {
  for (const char* json :
       {R"({"type": "Lowercase"})", R"({"type": "BertNormalizer"})",
        R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Replace"}]})",
        R"({"type": "Sequence"})", R"("NFC")"}) {
    EXPECT_THROW(Normalizer::from_json(nlohmann::json::parse(json), "t.json"), core::Error) << json;
  }
  EXPECT_EQ(Normalizer::from_json(nlohmann::json(), "t.json"), nullptr);
}

// Added tokens with normalized=true are matched by their normalized content in normalized text
// (HF normalizes their contents too); normalized=false ones by their raw content in raw text.
// Checked against tokenizers 0.23.3 with the GPT-NeoX tokenizer plus these two tokens:
// "éx", "e\u0301x" -> the first token; "a\u0301y" -> the second; "áy" -> not it.
TEST(UnicodeNormalization, NormalizedAddedTokensMatchTheirNormalizedContent) {
  REQUIRE_GPT_NEOX();
  nlohmann::json j = nlohmann::json::parse(core::read_file(testing::gpt_neox_path()));
  j["added_tokens"].push_back(testing::added_token_json(50280, "e\xCC\x81x", {.normalized = true}));
  j["added_tokens"].push_back(testing::added_token_json(50281, "a\xCC\x81y", {}));
  auto t = tokenizer::Tokenizer::from_json(j.dump(), "neox_plus_two.json");
  EXPECT_EQ(t.encode("\xC3\xA9x"), std::vector<std::uint32_t>{50280});
  EXPECT_EQ(t.encode("e\xCC\x81x"), std::vector<std::uint32_t>{50280});
  EXPECT_EQ(t.encode("a\xCC\x81y"), std::vector<std::uint32_t>{50281});
  EXPECT_EQ(t.encode("\xC3\xA1y"), (std::vector<std::uint32_t>{1757, 90}));
  EXPECT_EQ(t.encode("e\xCC\x81\xCC\x81x"), (std::vector<std::uint32_t>{860, 136, 212, 89}));
}

}  // namespace
}  // namespace tandem
