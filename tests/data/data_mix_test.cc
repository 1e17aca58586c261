// OLMo-core data-mix manifests (`data.mix`): the files come in the manifest's order, exactly as
// OLMo-core's DataMix.build resolves them (loader_mix.json, written by tools/make_data_fixtures.py
// with OLMo-core's own parser reading tests/fixtures/data/mix/sample-mix.txt); the order and the
// resume are checked against OLMo-core's loader in olmo_loader_parity_test.cc. Here: the file
// list and labels, and the errors on malformed manifests.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/data_mix.h"
#include "tandem/data/token_dataset.h"

namespace tandem::data {
namespace {

TEST(DataMix, FilesAndLabelsInOlmoCoreOrder) {
  auto fx = testing::read_json_fixture("loader_mix.json");
  DataConfig config = testing::parse_yaml(testing::fixture_config_yaml(fx, "mix", 34521));
  const std::string base = testing::fixture(fx["mix_base_dir"].get<std::string>()) + "/";
  std::vector<std::string> files, labels;
  for (const auto& src : config.sources)
    for (const auto& f : src.files) {
      ASSERT_EQ(f.rfind(base, 0), 0u) << f;
      files.push_back(f.substr(base.size()));
      labels.push_back(src.label);
    }
  EXPECT_EQ(files, fx["files"].get<std::vector<std::string>>());
  EXPECT_EQ(labels, fx["labels"].get<std::vector<std::string>>());
  // Not sorted, and basenames repeat: the order is the manifest's, not a directory listing's.
  EXPECT_FALSE(std::is_sorted(files.begin(), files.end()));
  TokenDataset dataset(config);
  EXPECT_EQ(dataset.num_instances(), fx["num_instances"].get<std::uint64_t>());
  EXPECT_EQ(dataset.fingerprint(), fx["fingerprint"].get<std::string>());
  EXPECT_EQ(dataset.source_label(3), "math");
}

class DataMixErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("mix_errors");
    std::filesystem::create_directories(dir_ + "/base/x/tok");
    testing::write_tokens<std::uint32_t>(dir_ + "/base/x/tok/a.npy",
                                         std::vector<std::uint32_t>(64, 5));
  }
  std::string manifest(const std::string& text) {
    testing::write_text(dir_ + "/mix.txt", text);
    return dir_ + "/mix.txt";
  }
  std::string error_of(const std::string& text) {
    try {
      read_data_mix(manifest(text), dir_ + "/base", "tok");
    } catch (const core::Error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(DataMixErrors, ParsesAsOlmoCoreDoes) {
  auto entries = read_data_mix(manifest("  # comment\n\nsrc,x/{TOKENIZER}/a.npy  \r\n"
                                        "other,x/{TOKENIZER}/a.npy\n"),
                               dir_ + "/base", "tok");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].label, "src");
  EXPECT_EQ(entries[0].path, dir_ + "/base/x/tok/a.npy");
  EXPECT_EQ(entries[0].line, 3);
  EXPECT_EQ(entries[1].label, "other");  // the same file twice is allowed, as in OLMo-core
}

TEST_F(DataMixErrors, MalformedLinesNameTheLine) {
  EXPECT_NE(
      error_of("a,x/{TOKENIZER}/a.npy\nno-comma-here\n").find("line 2: expected 'label,path'"),
      std::string::npos);
  EXPECT_NE(error_of("a,b,x/{TOKENIZER}/a.npy\n").find("line 1: expected 'label,path'"),
            std::string::npos);
  EXPECT_NE(error_of("# only\n\nsrc,x/tok/a.npy\n")
                .find("line 3: the path 'x/tok/a.npy' has no "
                      "{TOKENIZER}"),
            std::string::npos);
  EXPECT_NE(error_of("# nothing\n").find("lists no files"), std::string::npos);
}

// Paths from the manifest stay inside mix_base_dir (docs/reliability.md).
TEST_F(DataMixErrors, PathsThatLeaveTheBaseDirectoryAreRefused) {
  EXPECT_NE(error_of("a,x/{TOKENIZER}/a.npy\nb,../{TOKENIZER}/a.npy\n")
                .find("line 2: the path '../{TOKENIZER}/a.npy' is absolute or climbs out"),
            std::string::npos);
  EXPECT_NE(
      error_of("a,/etc/{TOKENIZER}/a.npy\n").find("line 1: the path '/etc/{TOKENIZER}/a.npy'"),
      std::string::npos);
  EXPECT_NE(error_of("a,x/{TOKENIZER}/../../../a.npy\n").find("climbs out with '..'"),
            std::string::npos);
}

TEST_F(DataMixErrors, ConfigErrorsNameTheKeyOrFile) {
  const std::string m = manifest("src,x/{TOKENIZER}/a.npy\nsrc,x/{TOKENIZER}/missing.npy\n");
  auto err = [&](const std::string& keys) -> std::string {
    try {
      testing::parse_yaml("data: {" + keys +
                          " sequence_length: 4, global_batch_size: 8, seed: 1, vocab_size: 100,"
                          " eos_token_id: 0, pad_token_id: 1}");
    } catch (const core::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(err("mix: " + m + ", mix_base_dir: " + dir_ + "/base, mix_tokenizer_id: tok,")
                .find("line 2: token file " + dir_ + "/base/x/tok/missing.npy does not exist"),
            std::string::npos);
  EXPECT_NE(err("mix: " + m + ", mix_tokenizer_id: tok,").find("needs mix_base_dir"),
            std::string::npos);
  EXPECT_NE(err("mix: " + m + ", mix_base_dir: " + dir_ + "/base,").find("needs mix_tokenizer_id"),
            std::string::npos);
  EXPECT_NE(
      err("mix: " + m + ", mix_base_dir: 's3://ai2-llm', mix_tokenizer_id: tok,").find("is remote"),
      std::string::npos);
  EXPECT_NE(err("mix: " + m + ", paths: [a.npy],")
                .find("exactly one of 'paths', 'sources', 'mix' or 'source_mixture'"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::data
