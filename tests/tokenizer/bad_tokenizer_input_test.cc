// tokenizer.json inputs that used to be accepted and silently wrong (ids past 32 bits wrapped,
// repeated keys or ids), or to crash (a huge id allocated gigabytes), and a document whose
// pre-tokenizer regex fails inside `data tokenize`'s parallel loop (it used to abort the job).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/tokenizer/tokenizer.h"

namespace tandem {
namespace {

using namespace core;
using namespace tokenizer;

namespace fs = std::filesystem;

nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(
      read_file(std::string(TANDEM_FIXTURES_DIR) + "/tokenizer/gpt2_style_tokenizer.json"));
}

std::string load_error(const std::string& text) {
  try {
    Tokenizer::from_json(text, "bad_tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BadTokenizer, VocabIdPast32BitsIsAnErrorNotAWrap) {
  nlohmann::json j = small_tokenizer();
  j["model"]["vocab"]["!"] = 4294967296ull + 2;  // 2^32 + 2 would wrap to 2
  const std::string e = load_error(j.dump());
  EXPECT_NE(e.find("does not fit 32 bits"), std::string::npos) << e;
  EXPECT_NE(e.find("\"!\""), std::string::npos) << e;
}

TEST(BadTokenizer, AddedTokenIdPast32BitsIsAnErrorNotAWrap) {
  nlohmann::json j = small_tokenizer();
  j["added_tokens"][1]["id"] = 4294967296ull + 1500;
  const std::string e = load_error(j.dump());
  EXPECT_NE(e.find("added_tokens[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("'id'"), std::string::npos) << e;
}

TEST(BadTokenizer, HugeIdIsAnErrorNotAnOutOfMemoryCrash) {
  nlohmann::json j = small_tokenizer();
  j["model"]["vocab"]["!"] = 4000000000ull;  // fits 32 bits; a dense table would be 128 GB
  const std::string e = load_error(j.dump());
  EXPECT_NE(e.find("mostly unused ids"), std::string::npos) << e;
}

TEST(BadTokenizer, TwoTokensWithOneIdAreAnError) {
  nlohmann::json j = small_tokenizer();
  const auto id = j["model"]["vocab"]["a"];
  j["model"]["vocab"]["b"] = id;
  const std::string e = load_error(j.dump());
  EXPECT_NE(e.find("have the same id"), std::string::npos) << e;
}

TEST(BadTokenizer, RepeatedKeyIsAnError) {
  std::string text = small_tokenizer().dump();
  text.insert(1, "\"model\": {\"type\": \"WordPiece\"}, ");  // first "model" would win silently
  const std::string e = load_error(text);
  EXPECT_NE(e.find("'model' appears twice"), std::string::npos) << e;
}

TEST(BadTokenizer, WrongTypesNameTheKey) {
  nlohmann::json j = small_tokenizer();
  j["added_tokens"][0]["special"] = "yes";
  std::string e = load_error(j.dump());
  EXPECT_NE(e.find("added_tokens[0]: field 'special'"), std::string::npos) << e;
  j = small_tokenizer();
  j["normalizer"] = "NFC";  // not an object: used to escape as a JSON type error
  e = load_error(j.dump());
  EXPECT_NE(e.find("bad_tokenizer.json"), std::string::npos) << e;
}

TEST(BadTokenizer, DirectoryInsteadOfAFileIsNamed) {
  const std::string dir = testing::temp_dir("tokenizer_is_dir");
  try {
    Tokenizer::from_file(dir);
    FAIL() << "a directory loaded as a tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// A Split pattern that backtracks exponentially on "aaa...a!" hits PCRE2's match limit: that
// document is counted as an encode_error and skipped; the others are written. --strict stops
// at it, naming the file and line, with nothing already committed lost.
TEST(TokenizeJob, DocumentThatFailsToEncodeIsCountedNotAnAbort) {
  const std::string dir = testing::temp_dir("tokenize_encode_error");
  nlohmann::json j = small_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "(a+)+$"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  write_file_atomic(dir + "/tokenizer.json", j.dump());
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"a good document\"}\n"
                                     << "{\"text\": \"" << std::string(64, 'a') << "!\"}\n"
                                     << "{\"text\": \"another good one\"}\n";
  auto r = testing::run_tandem("data tokenize --tokenizer " + dir + "/tokenizer.json --out " + dir +
                               "/out --threads 2 --no-progress --json " + dir + "/docs.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(summary["documents"], 2) << r.output;
  EXPECT_EQ(summary["problem_counts"]["encode_error"], 1) << r.output;
  EXPECT_EQ(summary["problems"][0]["line"], 2) << r.output;
  EXPECT_NE(summary["problems"][0]["message"].get<std::string>().find("limit"), std::string::npos)
      << r.output;

  auto strict = testing::run_tandem("data tokenize --tokenizer " + dir + "/tokenizer.json --out " +
                                    dir + "/strict --no-progress --strict " + dir + "/docs.jsonl");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find(dir + "/docs.jsonl:2: encode_error"), std::string::npos)
      << strict.output;
}

}  // namespace
}  // namespace tandem
