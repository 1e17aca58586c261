// Bad tokenizer files get clear errors naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "test_data.h"

namespace tandem {
namespace {

std::string temp_file(const std::string& name, const std::string& contents) {
  auto path = tandem::testing::temp_dir("tok_loader") + "/" + name;
  core::write_file_atomic(path, contents);
  return path;
}

void expect_error(const std::string& path, const std::string& fragment) {
  try {
    tokenizer::Tokenizer::from_file(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const core::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(TokenizerErrors, MissingFile) {
  expect_error("/nonexistent/dir/tokenizer.json", "does not exist");
}

TEST(TokenizerErrors, InvalidJson) {
  expect_error(temp_file("bad.json", "{\"model\": "), "invalid JSON");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  expect_error(
      temp_file("wordpiece.json",
                R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}, "pre_tokenizer": null})"),
      "\"WordPiece\" is not supported");
  expect_error(temp_file("unigram.json", R"({"model": {"type": "Unigram", "vocab": []}})"),
               "\"Unigram\" is not supported");
}

TEST(TokenizerErrors, UnsupportedPreTokenizerAndNormalizer) {
  expect_error(temp_file("metaspace.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "pre_tokenizer": {"type": "Metaspace"}})"),
               "\"Metaspace\" is not supported");
  expect_error(temp_file("lower.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "ByteLevel"}})"),
               "normalizer \"Lowercase\" is not supported");
  expect_error(temp_file("seq.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip"}]},
      "pre_tokenizer": {"type": "ByteLevel"}})"),
               "normalizer \"Strip\" is not supported");
  expect_error(temp_file("nobl.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"}})"),
               "no ByteLevel step");
}

TEST(TokenizerErrors, BadMergesAndRegex) {
  expect_error(temp_file("merge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0},
      "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel"}})"),
               "missing from the vocabulary");
  // A merge of entries outside the byte-level alphabet never applies, but its tokens must exist.
  expect_error(temp_file("merge2.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, " ": 1},
      "merges": [[" ", "b"]]}, "pre_tokenizer": {"type": "ByteLevel"}})"),
               "missing from the vocabulary");
  expect_error(temp_file("regex.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Removed"},
        {"type": "ByteLevel"}]}})"),
               "cannot compile regex");
}

TEST(TokenizerErrors, InvalidUtf8TextIsRefused) {
  tokenizer::Tokenizer tok =
      tokenizer::Tokenizer::from_file(testing::tokenizer_fixture("gpt2_style_tokenizer.json"));
  EXPECT_THROW(tok.encode("abc\xff"), core::Error);
  EXPECT_THROW(tok.encode("\xed\xa0\x80"), core::Error);  // an encoded surrogate
  EXPECT_THROW(tok.decode({999999}), core::Error);
}

}  // namespace
}  // namespace tandem
