// Bad input gives a clear tandem::core::Error naming the file, key or offset.
#include <gtest/gtest.h>

#include <functional>
#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/loader.h"

namespace tandem::data {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

std::string base_yaml(const std::string& paths, const std::string& extra = "") {
  return "data: {paths: [" + paths +
         "], sequence_length: 4, global_batch_size: 8, seed: 3, vocab_size: 1000, "
         "eos_token_id: 0, pad_token_id: 1" +
         extra + "}";
}

TEST(BadInput, SizeNotAMultipleOfTheDtype) {
  std::string dir = testing::temp_dir("odd");
  testing::write_text(dir + "/odd.npy", std::string(17, 'x'));  // uint16: 17 bytes
  DataConfig c = testing::parse_yaml(base_yaml("odd.npy"), dir);
  std::string msg = error_of([&] { TokenDataset ds(c); });
  EXPECT_NE(msg.find("odd.npy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
}

TEST(BadInput, EmptyFile) {
  std::string dir = testing::temp_dir("empty");
  testing::write_text(dir + "/empty.npy", "");
  DataConfig c = testing::parse_yaml(base_yaml("empty.npy"), dir);
  std::string msg = error_of([&] { TokenDataset ds(c); });
  EXPECT_NE(msg.find("empty.npy is empty"), std::string::npos) << msg;
}

TEST(BadInput, TokenIdAtOrAboveVocabWhenAsked) {
  std::string dir = testing::temp_dir("vocab");
  std::vector<std::uint16_t> toks(40, 7);
  toks[29] = 1000;  // == vocab_size
  testing::write_tokens(dir + "/big.npy", toks);
  DataConfig unchecked = testing::parse_yaml(base_yaml("big.npy"), dir);
  EXPECT_NO_THROW(TokenDataset ds(unchecked));  // only checked when asked
  DataConfig checked = testing::parse_yaml(base_yaml("big.npy", ", validate_token_ids: true"), dir);
  std::string msg = error_of([&] { TokenDataset ds(checked); });
  EXPECT_NE(msg.find("big.npy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 1000 at token offset 29 (byte offset 58)"), std::string::npos)
      << msg;
}

TEST(BadInput, MissingFileAndEmptyGlob) {
  std::string dir = testing::temp_dir("missing");
  std::string msg = error_of([&] { testing::parse_yaml(base_yaml("nope.npy"), dir); });
  EXPECT_NE(msg.find("nope.npy does not exist"), std::string::npos) << msg;
  msg = error_of([&] { testing::parse_yaml(base_yaml("\"*.npy\""), dir); });
  EXPECT_NE(msg.find("did not match any files"), std::string::npos) << msg;
}

TEST(BadInput, ConfigErrorsNameTheKey) {
  std::string dir = testing::temp_dir("cfg");
  testing::write_tokens(dir + "/a.npy", std::vector<std::uint16_t>(64, 5));
  std::string msg =
      error_of([&] { testing::parse_yaml(base_yaml("a.npy", ", sequnce_length: 4"), dir); });
  EXPECT_NE(msg.find("sequnce_length"), std::string::npos) << msg;
  msg = error_of([&] {
    testing::parse_yaml(
        "data: {paths: [a.npy], sequence_length: 4, global_batch_size: 10, seed: 1, "
        "vocab_size: 1000, eos_token_id: 0, pad_token_id: 1}",
        dir);
  });
  EXPECT_NE(msg.find("global_batch_size"), std::string::npos) << msg;
  msg = error_of(
      [&] { testing::parse_yaml(base_yaml("a.npy", ", max_target_sequence_length: 6"), dir); });
  EXPECT_NE(msg.find("max_target_sequence_length"), std::string::npos) << msg;
  msg = error_of([&] {
    testing::parse_yaml(base_yaml("a.npy", ", instance_filter_config: {repetition_max_cnt: 3}"),
                        dir);
  });
  EXPECT_NE(msg.find("repetition_max_cnt"), std::string::npos) << msg;
}

TEST(BadInput, FileChangedSinceTheCheckpointIsRefusedUnlessOverridden) {
  std::string dir = testing::temp_dir("changed");
  std::vector<std::uint16_t> toks(64);
  for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<std::uint16_t>(i);
  testing::write_tokens(dir + "/a.npy", toks);
  testing::write_tokens(dir + "/b.npy", toks);
  DataConfig c = testing::parse_yaml(base_yaml("a.npy, b.npy"), dir);
  LoaderState saved;
  {
    Loader l(c);
    l.next_batch(0, 1);
    saved = l.state();
  }
  toks.resize(48);
  testing::write_tokens(dir + "/b.npy", toks);
  Loader changed(c);
  std::string msg = error_of([&] { changed.restore(saved); });
  EXPECT_NE(msg.find("file b.npy changed size from 128 to 96 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ignore_fingerprint_mismatch"), std::string::npos) << msg;

  DataConfig other_seed = c;
  other_seed.seed = 4;
  testing::write_tokens(dir + "/b.npy", std::vector<std::uint16_t>(64, 9));
  Loader seeded(other_seed);
  msg = error_of([&] { seeded.restore(saved); });
  EXPECT_NE(msg.find("seed 3 but the config has seed 4"), std::string::npos) << msg;

  DataConfig other_len = testing::parse_yaml(
      "data: {paths: [a.npy, b.npy], sequence_length: 8, global_batch_size: 16, seed: 3, "
      "vocab_size: 1000, eos_token_id: 0, pad_token_id: 1}",
      dir);
  Loader longer(other_len);
  msg = error_of([&] { longer.restore(saved); });
  EXPECT_NE(msg.find("sequence_length 4 but the config has 8"), std::string::npos) << msg;

  other_len.ignore_fingerprint_mismatch = true;  // the deliberate case
  Loader deliberate(other_len);
  EXPECT_NO_THROW(deliberate.restore(saved));
  EXPECT_EQ(deliberate.state().batches_processed, 0u);  // 32 tokens / 128-token batches
}

TEST(BadInput, MalformedStateFileNamesTheField) {
  std::string dir = testing::temp_dir("state");
  testing::write_text(dir + "/s.json", R"({"dataset_fingerprint_version": "v2.0"})");
  std::string msg = error_of([&] { LoaderState::read(dir + "/s.json"); });
  EXPECT_NE(msg.find("s.json: missing field 'dataset_fingerprint'"), std::string::npos) << msg;
  testing::write_text(dir + "/s.json", "{not json");
  msg = error_of([&] { LoaderState::read(dir + "/s.json"); });
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
}

TEST(BadInput, FewerInstancesThanOneBatch) {
  std::string dir = testing::temp_dir("small");
  testing::write_tokens(dir + "/a.npy", std::vector<std::uint16_t>(6, 5));
  DataConfig c = testing::parse_yaml(base_yaml("a.npy"), dir);
  std::string msg = error_of([&] { Loader l(c); });
  EXPECT_NE(msg.find("fewer than one global batch"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tandem::data
