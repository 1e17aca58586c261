// The small golden list of dolma2 ids shared by the project encodes (and decodes) as listed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "test_data.h"

namespace tandem {
namespace {

TEST(Dolma2Golden, EncodesAsListed) {
  REQUIRE_DOLMA2();
  auto golden =
      nlohmann::json::parse(core::read_file(testing::tokenizer_fixture("golden_dolma2_ids.json")));
  ASSERT_GT(golden.size(), 0u);
  for (const auto& item : golden) {
    std::string text = item["text"].get<std::string>();
    auto expected = item["ids"].get<std::vector<std::uint32_t>>();
    EXPECT_EQ(tok->encode(text), expected) << "text: " << text;
    EXPECT_EQ(tok->decode(expected), text);
  }
}

TEST(Dolma2Golden, KnowsItsSpecialIds) {
  REQUIRE_DOLMA2();
  EXPECT_EQ(tok->vocab_size(), 100278u);
  EXPECT_EQ(tok->eos_id(), std::optional<std::uint32_t>(100257));
  EXPECT_EQ(tok->token_to_id("<|pad|>"), std::optional<std::uint32_t>(100277));
}

}  // namespace
}  // namespace tandem
