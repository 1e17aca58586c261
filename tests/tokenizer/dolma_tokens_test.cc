// `tandem data tokenize --dolma [--encode-special-tokens]` against AI2's own tokenizer tool:
// dolma.tokenizer.tokenize_file's ids for the documents of tests/fixtures/tokenizer/
// dolma_tokens.jsonl (tools/make_dolma_tokens_fixtures.py), with and without
// encode_special_tokens, and the rules of dolma_documents.h one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/io/token_file.h"
#include "tandem/tokenizer/dolma_documents.h"
#include "test_data.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

// Every id of the token files in `dir`, in part order.
std::vector<std::uint32_t> read_parts(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".npy") names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  std::vector<std::uint32_t> all;
  for (const auto& n : names) {
    io::TokenFile f(n, io::TokenDtype::kU32);  // dolma2: uint32
    std::vector<std::uint32_t> ids(f.num_tokens());
    f.read(0, ids.size(), ids.data());
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

void expect_like_dolma(const std::string& run, const std::string& flags) {
  REQUIRE_DOLMA2();
  const auto fixture =
      nlohmann::json::parse(core::read_file(testing::tokenizer_fixture("dolma_tokens.json")));
  std::vector<std::uint32_t> expected;
  for (const auto& doc : fixture["runs"][run])
    for (const auto& id : doc["ids"]) expected.push_back(id.get<std::uint32_t>());
  ASSERT_GT(fixture["runs"][run].size(), 200u);
  ASSERT_LT(fixture["runs"][run].size(), fixture["documents"].get<std::size_t>());  // some skipped

  const fs::path dir = testing::temp_dir("dolma_tokens");
  // Small files and three threads: documents cross part boundaries in parallel batches.
  const auto r = testing::run_tandem("data tokenize --tokenizer " + testing::dolma2_path() +
                                     " --out " + (dir / "out").string() + " " + flags +
                                     " --threads 3 --max-tokens-per-file 1000 --no-progress " +
                                     testing::tokenizer_fixture("dolma_tokens.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::uint32_t> got = read_parts(dir / "out");
  ASSERT_EQ(got.size(), expected.size());
  const auto diff = std::mismatch(got.begin(), got.end(), expected.begin());
  EXPECT_TRUE(diff.first == got.end()) << "first difference at token " << (diff.first - got.begin())
                                       << ": " << *diff.first << " vs dolma's " << *diff.second;
  fs::remove_all(dir);
}

TEST(DolmaTokens, DocumentsAreTheIdsOfDolmasTokenizeFile) {
  expect_like_dolma("default", "--dolma");
}

TEST(DolmaTokens, EncodeSpecialTokensIsDolmasFlag) {
  expect_like_dolma("encode_special_tokens", "--dolma --encode-special-tokens");
}

TEST(DolmaTokens, WithoutTheFlagTheRawTextIsEncodedAndEveryDocumentGetsEos) {
  // The fixture tells the two apart: tandem's own documents keep whitespace-only text and
  // append EOS after an EOS written in the text.
  REQUIRE_DOLMA2();
  const auto fixture =
      nlohmann::json::parse(core::read_file(testing::tokenizer_fixture("dolma_tokens.json")));
  std::size_t dolma_tokens = 0;
  for (const auto& doc : fixture["runs"]["default"]) dolma_tokens += doc["ids"].size();
  const fs::path dir = testing::temp_dir("dolma_tokens_raw");
  const auto r = testing::run_tandem("data tokenize --tokenizer " + testing::dolma2_path() +
                                     " --out " + (dir / "out").string() + " --no-progress " +
                                     testing::tokenizer_fixture("dolma_tokens.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(read_parts(dir / "out").size(), dolma_tokens);
  fs::remove_all(dir);
}

TEST(DolmaTokens, StripIsPythonsStrWhitespace) {
  using tokenizer::strip_python_whitespace;
  EXPECT_EQ(strip_python_whitespace(""), "");
  EXPECT_EQ(strip_python_whitespace(" \t\n\v\f\r"), "");
  EXPECT_EQ(strip_python_whitespace("\x1c\x1d\x1e\x1fx\x1f"), "x");
  // U+0085, U+00A0, U+1680, U+2000, U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
  EXPECT_EQ(
      strip_python_whitespace("\u0085\u00a0\u1680\u2000a b\u200a\u2028\u2029\u202f\u205f\u3000"),
      "a b");
  // Not whitespace for Python: zero-width space, Mongolian vowel separator, BOM, NUL.
  EXPECT_EQ(strip_python_whitespace("\u200bx\u200b"), "\u200bx\u200b");
  EXPECT_EQ(strip_python_whitespace("\u180e x \ufeff"), "\u180e x \ufeff");
  EXPECT_EQ(strip_python_whitespace(std::string("\0 x", 3)), std::string("\0 x", 3));
  // Multi-byte characters next to the stripped ones stay whole.
  EXPECT_EQ(strip_python_whitespace("\u3000日本\u3000"), "日本");
  EXPECT_EQ(strip_python_whitespace(" 😀 "), "😀");
}

TEST(DolmaTokens, EosIsAppendedUnlessTheIdsEndWithIt) {
  std::vector<std::uint32_t> ids = {5, 7};
  tokenizer::append_eos_like_dolma(ids, 9);
  EXPECT_EQ(ids, (std::vector<std::uint32_t>{5, 7, 9}));
  tokenizer::append_eos_like_dolma(ids, 9);
  EXPECT_EQ(ids, (std::vector<std::uint32_t>{5, 7, 9}));
  std::vector<std::uint32_t> none;
  tokenizer::append_eos_like_dolma(none, 9);
  EXPECT_EQ(none, (std::vector<std::uint32_t>{9}));
}

TEST(DolmaTokens, EncodeSpecialTokensLeavesNonSpecialAddedTokensMatched) {
  // gpt2_style_tokenizer.json has special and non-special added tokens (tools/
  // make_tokenizer_fixtures.py): only the special ones become text.
  const auto tok =
      tokenizer::Tokenizer::from_file(testing::tokenizer_fixture("gpt2_style_tokenizer.json"));
  const tokenizer::AddedToken* special = nullptr;
  const tokenizer::AddedToken* plain = nullptr;
  for (const auto& t : tok.added().tokens()) {
    if (t.special && !special && !t.single_word && !t.lstrip && !t.rstrip) special = &t;
    if (!t.special && !plain && !t.single_word && !t.lstrip && !t.rstrip) plain = &t;
  }
  ASSERT_NE(special, nullptr);
  ASSERT_NE(plain, nullptr);
  const std::string text = "x" + special->content + "y" + plain->content + "z";
  tokenizer::Encoder as_text(tok, true);
  tokenizer::Encoder recognised(tok, false);
  const auto a = as_text.encode(text);
  const auto b = recognised.encode(text);
  EXPECT_EQ(std::count(b.begin(), b.end(), special->id), 1);
  EXPECT_EQ(std::count(a.begin(), a.end(), special->id), 0);
  EXPECT_EQ(std::count(a.begin(), a.end(), plain->id), 1);
  EXPECT_EQ(std::count(b.begin(), b.end(), plain->id), 1);
  // As text, the special token's characters are encoded as the model encodes them alone.
  const auto alone = as_text.encode(special->content);
  EXPECT_TRUE(std::search(a.begin(), a.end(), alone.begin(), alone.end()) != a.end());
}

}  // namespace
}  // namespace tandem
