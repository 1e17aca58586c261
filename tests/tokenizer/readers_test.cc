// Input readers: compressed streams (multi-member gzip, multi-frame zstd), long lines, UTF-8
// checks, and input expansion.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/test_support.h"
#include "compress_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/utf8.h"
#include "tandem/io/text_inputs.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

class Readers : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unique per process and test: these tests run in parallel under ctest -j.
    dir_ = tandem::testing::temp_dir("tok_readers");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, const std::string& data) {
    std::string p = (dir_ / name).string();
    core::write_file_atomic(p, data);
    return p;
  }
  fs::path dir_;
};

TEST_F(Readers, ConcatenatedGzipMembersAndZstdFramesReadWhole) {
  std::string a = "{\"text\": \"one\"}\n", b = "{\"text\": \"two\"}\n";
  for (const auto& path :
       {put("m.jsonl.gz", testing::gzip_bytes(a) + testing::gzip_bytes(b)),
        put("m.jsonl.zst", testing::zstd_bytes(a, 1) + testing::zstd_bytes(b, 1))}) {
    io::DocumentReader reader(path);
    io::Document doc;
    std::vector<std::string> texts;
    while (reader.next(doc)) texts.push_back(doc.text);
    EXPECT_EQ(texts, (std::vector<std::string>{"one", "two"})) << path;
    EXPECT_EQ(doc.line, 2u);
  }
}

TEST_F(Readers, LongLinesAndCrlfSurvive) {
  std::string big(3 << 20, 'x');
  std::string path = put("long.jsonl", "{\"text\": \"" + big + "\"}\r\n{\"text\": \"a\\r\\nb\"}");
  io::DocumentReader reader(path);
  io::Document doc;
  ASSERT_TRUE(reader.next(doc));
  EXPECT_EQ(doc.text, big);
  ASSERT_TRUE(reader.next(doc));  // no newline at the end of the file
  EXPECT_EQ(doc.text, "a\r\nb");
  EXPECT_EQ(doc.id, path + ":2");
  EXPECT_FALSE(reader.next(doc));
}

TEST_F(Readers, NonUtf8TextFileIsAProblemWithItsLine) {
  std::string path = put("latin1.txt", "line one\nline two caf\xe9\n");
  io::DocumentReader reader(path);
  io::Document doc;
  EXPECT_FALSE(reader.next(doc));
  ASSERT_EQ(reader.problems().size(), 1u);
  EXPECT_EQ(reader.problems()[0].line, 2u);
  EXPECT_EQ(reader.problems()[0].kind, "non_utf8");
}

TEST_F(Readers, ExpandsDirectoriesAndGlobsInOrder) {
  fs::create_directories(dir_ / "d" / "e");
  put("d/b.txt", "b");
  put("d/a.jsonl.zst", testing::zstd_bytes("{\"text\": \"a\"}\n", 1));
  put("d/e/c.txt", "c");
  auto files = io::expand_inputs({(dir_ / "d").string(), (dir_ / "d" / "*.txt").string()});
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(fs::path(files[0].path).filename(), "a.jsonl.zst");
  EXPECT_EQ(files[0].format, io::InputFormat::kJsonl);
  EXPECT_EQ(fs::path(files[1].path).filename(), "b.txt");
  EXPECT_EQ(files[1].format, io::InputFormat::kText);
  EXPECT_EQ(fs::path(files[2].path).filename(), "c.txt");
  EXPECT_EQ(fs::path(files[3].path).filename(), "b.txt");
  EXPECT_THROW(io::expand_inputs({(dir_ / "nothing*").string()}), core::Error);
  EXPECT_THROW(io::expand_inputs({(dir_ / "absent.txt").string()}), core::Error);
}

TEST(Utf8, ValidatesLikeRustAndDecodesLossily) {
  EXPECT_TRUE(core::utf8::is_valid("plain ascii and é and 日本 and 😀"));
  EXPECT_FALSE(core::utf8::is_valid("\xc0\xaf"));          // overlong
  EXPECT_FALSE(core::utf8::is_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(core::utf8::is_valid("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(core::utf8::first_invalid("abc\xff"), 3u);
  // One U+FFFD per maximal invalid subsequence, as String::from_utf8_lossy.
  EXPECT_EQ(core::utf8::decode_lossy("a\xf0\x9f\x98z"), "a\xef\xbf\xbdz");
  EXPECT_EQ(core::utf8::decode_lossy("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");
}

}  // namespace
}  // namespace tandem
