// Parity on the real corpus (>= 20 MB of Debian documentation, fetched by
// scripts/fetch_data.sh): every document's ids must hash to what HF tokenizers produced. If the
// Debian package changed a document's text, the test says so instead of comparing ids.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "tandem/core/hash.h"
#include "tandem/io/text_inputs.h"
#include "test_data.h"

namespace tandem {
namespace {

std::string ids_digest(const std::vector<std::uint32_t>& ids) {
  std::vector<std::uint8_t> bytes(ids.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::uint32_t v = ids[i];
    for (int k = 0; k < 4; ++k) bytes[i * 4 + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
  return core::sha256_hex(bytes).substr(0, 16);
}

// Every document of the corpus against the fixture's digests of HF's ids.
void expect_corpus_parity(const tokenizer::Tokenizer* tok, const std::string& fixture_name) {
  // The digests are gzip-compressed; reading them also exercises our gzip reader.
  std::string digests_text;
  {
    auto source = io::open_byte_source(testing::tokenizer_fixture(fixture_name));
    digests_text = io::read_all(*source);
  }
  auto digests = nlohmann::json::parse(digests_text);
  ASSERT_EQ(digests["tokenizer_sha256"].get<std::string>(), tok->sha256());
  const std::string corpus = testing::data_cache_dir() + "/corpus";
  tokenizer::Encoder encoder(*tok);
  std::uint64_t bytes = 0, tokens = 0, documents = 0, mismatches = 0, changed = 0;
  for (const auto& part : digests["parts"]) {
    std::string path = corpus + "/" + part["file"].get<std::string>();
    ASSERT_TRUE(std::filesystem::exists(path))
        << path << " is missing: run scripts/fetch_data.sh first";
    std::map<std::string, std::string> texts;
    io::DocumentReader reader(path);
    io::Document doc;
    while (reader.next(doc)) texts[doc.id] = doc.text;
    ASSERT_EQ(reader.problems().size(), 0u) << path;
    for (const auto& row : part["documents"]) {
      std::string id = row[0].get<std::string>();
      auto it = texts.find(id);
      if (it == texts.end()) {
        ++changed;
        ADD_FAILURE() << path << ": document " << id << " is gone (Debian package changed?)";
        continue;
      }
      const std::string& text = it->second;
      if (core::sha256_hex(text).substr(0, 16) != row[1].get<std::string>()) {
        ++changed;
        ADD_FAILURE() << path << ": the text of " << id
                      << " differs from the one the fixture was made from (Debian package "
                         "version changed?); rerun tools/make_tokenizer_fixtures.py";
        continue;
      }
      auto ids = encoder.encode(text);
      if (ids.size() != row[2].get<std::size_t>() || ids_digest(ids) != row[3].get<std::string>()) {
        ++mismatches;
        ADD_FAILURE() << path << ": ids of " << id << " differ from HF (" << ids.size()
                      << " tokens, HF " << row[2] << ")";
      }
      bytes += text.size();
      tokens += ids.size();
      ++documents;
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(changed, 0u);
  EXPECT_GE(bytes, 20u * 1000 * 1000) << "less than 20 MB of text compared";
  EXPECT_EQ(tokens, digests["tokens"].get<std::uint64_t>());
  std::printf("corpus parity (%s): %llu documents, %.1f MB, %llu tokens, %llu mismatches\n",
              fixture_name.c_str(), static_cast<unsigned long long>(documents), bytes / 1e6,
              static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(mismatches));
}

TEST(Dolma2CorpusParity, EveryDocumentMatchesHf) {
  REQUIRE_DOLMA2();
  expect_corpus_parity(tok, "dolma2_corpus_digests.json.gz");
}

// OLMo's GPT-NeoX tokenizer (NFC normalizer, normalized added tokens for runs of spaces). The
// corpus is nearly all NFC already (3 of its 3,886 documents change); the normalizer's own cases
// are gpt_neox_cases.json's and unicode_normalization.json.gz's.
TEST(GptNeoxCorpusParity, EveryDocumentMatchesHf) {
  REQUIRE_GPT_NEOX();
  expect_corpus_parity(tok, "gpt_neox_corpus_digests.json.gz");
}

}  // namespace
}  // namespace tandem
