// End-to-end tests of `tandem data tokenize` and `tandem data inspect` on small inputs of every
// kind, including bad ones.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "compress_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/io/token_file.h"
#include "test_data.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

struct RunResult {
  int status;
  std::string output;  // stdout and stderr together
};

RunResult run(const std::string& args) {
  std::string cmd = std::string(TANDEM_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tandem::testing::temp_dir("tok_cli");
    fs::create_directories(dir_ / "in" / "sub");
    tokenizer_ = testing::tokenizer_fixture("gpt2_style_tokenizer.json");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  void write(const std::string& rel, const std::string& data) {
    core::write_file_atomic(path(rel), data);
  }

  // A mix of every input kind; the JSONL holds one malformed line, one without text, one with a
  // lone surrogate escape and one with invalid UTF-8.
  void write_mixed_inputs() {
    write("in/a.txt", "A plain text document.\nWith two lines, tabs\tand  spaces.\n");
    write("in/b.jsonl",
          "{\"id\": \"b1\", \"text\": \"First JSONL document: don't stop!\"}\n"
          "\n"
          "{\"text\": \"Second one <|endoftext|> has the EOS text inside.\"}\n"
          "{\"text\": \"broken\n"
          "{\"meta\": 1}\n"
          "{\"text\": \"bad surrogate \\ud800\"}\n"
          "{\"text\": \"bad byte \xff here\"}\n"
          "{\"text\": \"\"}\n"
          "{\"text\": \"Last good one, 12345 numbers 3.14\"}\n");
    std::string jsonl;
    for (int i = 0; i < 40; ++i)
      jsonl += nlohmann::json{{"text", "Compressed document number " + std::to_string(i) +
                                           " with some words repeated words words."}}
                   .dump() +
               "\n";
    write("in/sub/c.jsonl.gz", testing::gzip_bytes(jsonl));
    write("in/sub/d.jsonl.zst",
          testing::zstd_bytes(jsonl + "{\"text\": \"zstd tail 日本語 😀\"}\n"));
  }

  std::string tokenize(const std::string& out, const std::string& extra) {
    RunResult r = run("data tokenize --tokenizer " + tokenizer_ + " --out " + path(out) + " " +
                      extra + " --json --no-progress " + path("in"));
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output;
  }

  std::vector<std::string> parts(const std::string& out) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path(out)))
      files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    return files;
  }

  fs::path dir_;
  std::string tokenizer_;
};

TEST_F(TokenizeCli, OutputIsIdenticalForAnyThreadCountAndMatchesTheTokenizer) {
  write_mixed_inputs();
  std::string report = tokenize("out1", "--threads 1 --max-tokens-per-file 97");
  tokenize("out2", "--threads 2 --max-tokens-per-file 97");
  tokenize("out3", "--threads 3 --max-tokens-per-file 97");
  auto names = parts("out1");
  ASSERT_GT(names.size(), 4u);  // several parts, each with a sidecar
  EXPECT_EQ(names, parts("out2"));
  EXPECT_EQ(names, parts("out3"));
  for (const auto& n : names) {
    EXPECT_EQ(core::read_file(path("out1/" + n)), core::read_file(path("out2/" + n))) << n;
    EXPECT_EQ(core::read_file(path("out1/" + n)), core::read_file(path("out3/" + n))) << n;
  }
  // Problems are reported with file:line, and counted.
  EXPECT_NE(report.find("b.jsonl:4: malformed_json"), std::string::npos) << report;
  EXPECT_NE(report.find("b.jsonl:5: missing_text"), std::string::npos) << report;
  EXPECT_NE(report.find("b.jsonl:6: non_utf8"), std::string::npos) << report;
  EXPECT_NE(report.find("b.jsonl:7: non_utf8"), std::string::npos) << report;

  // The concatenated parts are exactly encode(doc) + EOS for each good document, in order.
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(tokenizer_);
  const std::uint32_t eos = *tok.eos_id();
  std::vector<std::string> docs = {
      core::read_file(path("in/a.txt")), "First JSONL document: don't stop!",
      "Second one <|endoftext|> has the EOS text inside.", "Last good one, 12345 numbers 3.14"};
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < 40; ++i)
      docs.push_back("Compressed document number " + std::to_string(i) +
                     " with some words repeated words words.");
  docs.push_back("zstd tail 日本語 😀");
  std::vector<std::uint32_t> expected;
  for (const auto& d : docs) {
    auto ids = tok.encode(d);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(eos);
  }
  std::vector<std::uint32_t> got;
  std::uint64_t documents = 0;
  for (const auto& n : names) {
    if (n.size() < 4 || n.substr(n.size() - 4) != ".npy") continue;
    io::TokenFile f(path("out1/" + n), io::TokenDtype::kU16);  // vocab 1504 -> uint16
    EXPECT_LE(f.num_tokens(), 97u);
    std::vector<std::uint32_t> ids(f.num_tokens());
    f.read(0, ids.size(), ids.data());
    got.insert(got.end(), ids.begin(), ids.end());
    auto sidecar =
        nlohmann::json::parse(core::read_file(path("out1/" + n.substr(0, n.size() - 4) + ".json")));
    EXPECT_EQ(sidecar["dtype"], "uint16");
    EXPECT_EQ(sidecar["tokens"].get<std::uint64_t>(), f.num_tokens());
    EXPECT_EQ(sidecar["tokenizer_sha256"], tok.sha256());
    documents += sidecar["documents"].get<std::uint64_t>();
  }
  EXPECT_EQ(got, expected);
  // The EOS written inside document 3's text is counted too: documents = EOS count.
  EXPECT_EQ(documents, docs.size() + 1);
}

TEST_F(TokenizeCli, RerunKeepsFinishedFilesAndResumesAPartialRun) {
  write_mixed_inputs();
  tokenize("out", "--max-tokens-per-file 120");
  auto names = parts("out");
  std::map<std::string, std::string> before;
  for (const auto& n : names) before[n] = core::read_file(path("out/" + n));
  std::string again = tokenize("out", "--max-tokens-per-file 120");
  auto summary = nlohmann::json::parse(again.substr(again.find('{')));
  EXPECT_EQ(summary["files_written"].size(), 0u) << again;
  EXPECT_EQ(summary["files_kept"].size() * 2, names.size());
  // Damage a middle part: the re-run keeps the parts before it and rewrites from there on.
  write("out/part-00002.npy", "garbage");
  std::string redo = tokenize("out", "--max-tokens-per-file 120");
  summary = nlohmann::json::parse(redo.substr(redo.find('{')));
  EXPECT_EQ(summary["files_kept"].size(), 2u) << redo;
  EXPECT_EQ(parts("out"), names);
  for (const auto& n : names) EXPECT_EQ(core::read_file(path("out/" + n)), before[n]) << n;
  // Other settings in the same directory are refused rather than mixed.
  RunResult other = run("data tokenize --tokenizer " + tokenizer_ + " --out " + path("out") +
                        " --max-tokens-per-file 50 --no-progress " + path("in"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("different tokenize run"), std::string::npos) << other.output;
}

TEST_F(TokenizeCli, StrictFailsAtTheFirstBadRecord) {
  write_mixed_inputs();
  RunResult r = run("data tokenize --strict --no-progress --tokenizer " + tokenizer_ + " --out " +
                    path("out") + " " + path("in"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("b.jsonl:4: malformed_json"), std::string::npos) << r.output;
}

TEST_F(TokenizeCli, TruncatedCompressedInputsFailWithoutLeavingFiles) {
  std::string jsonl;
  for (int i = 0; i < 200; ++i) jsonl += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  std::string gz = testing::gzip_bytes(jsonl), zst = testing::zstd_bytes(jsonl);
  write("in/t.jsonl.gz", gz.substr(0, gz.size() / 2));
  RunResult r = run("data tokenize --no-progress --tokenizer " + tokenizer_ + " --out " +
                    path("out") + " " + path("in/t.jsonl.gz"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("t.jsonl.gz: truncated gzip"), std::string::npos) << r.output;
  EXPECT_TRUE(parts("out").empty()) << "files left behind";
  write("in/t.jsonl.zst", zst.substr(0, zst.size() - 7));
  r = run("data tokenize --no-progress --tokenizer " + tokenizer_ + " --out " + path("out") + " " +
          path("in/t.jsonl.zst"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("t.jsonl.zst: truncated zstd"), std::string::npos) << r.output;
  EXPECT_TRUE(parts("out").empty()) << "files left behind";
  write("in/bad.jsonl.gz", "this is not gzip at all");
  r = run("data tokenize --no-progress --tokenizer " + tokenizer_ + " --out " + path("out") + " " +
          path("in/bad.jsonl.gz"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("bad.jsonl.gz: corrupt gzip"), std::string::npos) << r.output;
}

TEST_F(TokenizeCli, MissingTokenizerAndUnreadableInputsAreClearErrors) {
  write("in/a.txt", "hello");
  RunResult r = run("data tokenize --no-progress --tokenizer " + path("nope.json") + " --out " +
                    path("out") + " " + path("in"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("nope.json does not exist"), std::string::npos) << r.output;
  r = run("data tokenize --no-progress --tokenizer " + tokenizer_ + " --out " + path("out") + " " +
          path("in/missing.jsonl"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("missing.jsonl does not exist"), std::string::npos) << r.output;
  r = run("data tokenize --no-progress --tokenizer " + tokenizer_ + " --out " + path("out") + " '" +
          path("in/*.parquet") + "'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("matches no files"), std::string::npos) << r.output;
  write("in/unsupported.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  r = run("data tokenize --no-progress --tokenizer " + path("in/unsupported.json") + " --out " +
          path("out") + " " + path("in/a.txt"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("\"WordPiece\" is not supported"), std::string::npos) << r.output;
}

TEST_F(TokenizeCli, InspectReportsCountsAndDecodesASample) {
  write("in/a.txt", "Inspect me, please.");
  write("in/b.jsonl", "{\"text\": \"second\"}\n");
  tokenize("out", "");
  RunResult r =
      run("data inspect " + path("out/part-00000.npy") + " --tokenizer " + tokenizer_ + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(tokenizer_);
  EXPECT_EQ(j["tokens"].get<std::size_t>(),
            tok.encode("Inspect me, please.").size() + tok.encode("second").size() + 2);
  EXPECT_EQ(j["documents"], 2);
  EXPECT_EQ(j["dtype"], "uint16");
  EXPECT_EQ(j["sidecar_matches"], true);
  EXPECT_EQ(j["sample_text"], "Inspect me, please.<|endoftext|>second<|endoftext|>");
  r = run("data inspect " + path("out/none.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace tandem
