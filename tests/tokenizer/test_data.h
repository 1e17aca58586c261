// Where the tokenizer tests find their inputs: committed fixtures, and the tokenizers (dolma2,
// GPT-NeoX) and the corpus from scripts/fetch_data.sh's cache
// (${TANDEM_DATA_DIR:-<repo>/.cache/data}).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "../support/test_support.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem::testing {

// A committed fixture of the tokenizer tests (tests/fixtures/tokenizer/).
inline std::string tokenizer_fixture(const std::string& name) {
  return fixture("tokenizer/" + name);
}

// One entry of tokenizer.json's "added_tokens" (flags not named are false).
struct AddedTokenFlags {
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};
inline nlohmann::json added_token_json(std::uint32_t id, const std::string& content,
                                       AddedTokenFlags f) {
  return {{"id", id},
          {"content", content},
          {"single_word", f.single_word},
          {"lstrip", f.lstrip},
          {"rstrip", f.rstrip},
          {"normalized", f.normalized},
          {"special", f.special}};
}

inline std::string data_cache_dir() {
  const char* env = std::getenv("TANDEM_DATA_DIR");
  if (env && *env) return env;
  return std::string(TANDEM_SOURCE_DIR) + "/.cache/data";
}

inline std::string dolma2_path() { return data_cache_dir() + "/tokenizers/allenai_dolma2.json"; }

// The dolma2 tokenizer, loaded once; fails the test clearly when the cache is missing.
inline const tokenizer::Tokenizer* dolma2() {
  static const tokenizer::Tokenizer* tokenizer = []() -> const tokenizer::Tokenizer* {
    if (!std::filesystem::exists(dolma2_path())) return nullptr;
    return new tokenizer::Tokenizer(tokenizer::Tokenizer::from_file(dolma2_path()));
  }();
  return tokenizer;
}

inline std::string gpt_neox_path() {
  return data_cache_dir() + "/tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json";
}

// OLMo's GPT-NeoX tokenizer (OLMo-core's gpt_neox_olmo_dolma_v1_5), loaded once; null if absent.
inline const tokenizer::Tokenizer* gpt_neox() {
  static const tokenizer::Tokenizer* tokenizer = []() -> const tokenizer::Tokenizer* {
    if (!std::filesystem::exists(gpt_neox_path())) return nullptr;
    return new tokenizer::Tokenizer(tokenizer::Tokenizer::from_file(gpt_neox_path()));
  }();
  return tokenizer;
}

#define REQUIRE_GPT_NEOX()                                                                   \
  const ::tandem::tokenizer::Tokenizer* tok = ::tandem::testing::gpt_neox();                 \
  ASSERT_NE(tok, nullptr) << ::tandem::testing::gpt_neox_path()                              \
                          << " is missing: run scripts/fetch_data.sh first (it fetches the " \
                             "tokenizers and the corpus)"

#define REQUIRE_DOLMA2()                                                                     \
  const ::tandem::tokenizer::Tokenizer* tok = ::tandem::testing::dolma2();                   \
  ASSERT_NE(tok, nullptr) << ::tandem::testing::dolma2_path()                                \
                          << " is missing: run scripts/fetch_data.sh first (it fetches the " \
                             "dolma2 tokenizer and the corpus)"

}  // namespace tandem::testing
