// OLMo's GPT-NeoX tokenizer (allenai_gpt-neox-olmo-dolma-v1_5.json, OLMo-core's
// TokenizerConfig.gpt_neox_olmo_dolma_v1_5()) against HF tokenizers: an NFC normalizer, added
// tokens with normalized=true (the PII placeholders, runs of 2..24 spaces) and vocabulary entries
// outside the byte-level alphabet. Fixture: tools/make_tokenizer_fixtures.py neox.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "test_data.h"

namespace tandem {
namespace {

std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

TEST(GptNeoxParity, HardNormalizationAndRandomStringsMatchHf) {
  REQUIRE_GPT_NEOX();
  auto fixture =
      nlohmann::json::parse(core::read_file(testing::tokenizer_fixture("gpt_neox_cases.json")));
  ASSERT_EQ(fixture["tokenizer_sha256"].get<std::string>(), tok->sha256());
  tokenizer::Encoder encoder(*tok);
  int mismatches = 0, normalized = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<std::uint32_t>>();
    const auto got = encoder.encode(text);
    if (got != expected) {
      ++mismatches;
      ADD_FAILURE() << "ids differ from HF for " << quoted(text);
    }
    // HF's decode (special tokens kept) of its own ids.
    const std::string decoded = c["decoded"].get<std::string>();
    EXPECT_EQ(tok->decode(expected), decoded) << quoted(text);
    normalized += decoded != text;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(fixture["cases"].size(), 650u);
  // The cases must exercise the normalizer: many decode to a text other than their input.
  EXPECT_GE(normalized, 100) << "too few cases change under NFC";
}

TEST(GptNeoxParity, VocabularyAndSpecialIdsAreOlmoCores) {
  REQUIRE_GPT_NEOX();
  // OLMo-core: vocab_size 50280, eos_token_id 50279, pad_token_id 1.
  EXPECT_EQ(tok->vocab_size(), 50280u);
  EXPECT_EQ(tok->eos_id(), std::optional<std::uint32_t>(50279));
  EXPECT_EQ(tok->token_to_id("<|padding|>"), std::optional<std::uint32_t>(1));
  ASSERT_NE(tok->normalizer(), nullptr);
  EXPECT_EQ(tok->normalizer()->description(), "NFC");
  // The vocabulary's own "  " entry (two real spaces, outside the byte-level alphabet) is the
  // added token 50276; decoding either way gives the two spaces.
  EXPECT_EQ(tok->encode("  "), std::vector<std::uint32_t>{50276});
  EXPECT_EQ(tok->decode({50276}), "  ");
}

}  // namespace
}  // namespace tandem
