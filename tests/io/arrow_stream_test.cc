// Arrow IPC streams as HF `datasets` writes them: the MMLU folders of the in-loop fixture (written
// by datasets.save_to_disk in tools/make_inloop_eval_fixtures.py), read without pyarrow; values
// checked against what pyarrow reads from the same files.
#include <gtest/gtest.h>

#include <filesystem>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/arrow_stream.h"

namespace tandem::io {
namespace {

std::string mmlu() {
  return std::string(TANDEM_FIXTURES_DIR) + "/eval/inloop/hf_datasets/hails/mmlu_no_train";
}

TEST(ArrowStream, ReadsDatasetsSaveToDiskFolder) {
  ArrowTable t = read_hf_dataset_dir(mmlu() + "/anatomy/dev");
  ASSERT_EQ(t.num_rows, 5);
  const auto& q = t.column("question", ArrowColumn::Kind::kString).strings;
  const auto& s = t.column("subject", ArrowColumn::Kind::kString).strings;
  const auto& c = t.column("choices", ArrowColumn::Kind::kStringList).lists;
  const auto& a = t.column("answer", ArrowColumn::Kind::kInt).ints;
  ASSERT_EQ(q.size(), 5u);
  EXPECT_EQ(q[4], "Which of the following is the body cavity that contains the pituitary gland?");
  EXPECT_EQ(s[4], "anatomy");
  EXPECT_EQ(c[4], (std::vector<std::string>{"Abdominal", "Cranial", "Pleural", "Spinal"}));
  EXPECT_EQ(a[4], 1);
}

TEST(ArrowStream, LongStrings) {
  ArrowTable t = read_hf_dataset_dir(mmlu() + "/high_school_european_history/test");
  ASSERT_EQ(t.num_rows, 1);
  // 922 code points in Python; UTF-8 bytes may be more.
  EXPECT_GE(t.column("question", ArrowColumn::Kind::kString).strings[0].size(), 922u);
  EXPECT_EQ(t.column("answer", ArrowColumn::Kind::kInt).ints[0], 2);
  EXPECT_TRUE(t.column("choices", ArrowColumn::Kind::kStringList)
                  .lists[0][3]
                  .starts_with("a supernatural phenomenon"));
}

TEST(ArrowStream, ErrorsNameTheFileOrColumn) {
  const std::string file = mmlu() + "/anatomy/dev/data-00000-of-00001.arrow";
  ArrowTable t = read_arrow_stream(file);
  EXPECT_THROW(t.column("answer", ArrowColumn::Kind::kString), core::Error);
  EXPECT_THROW(t.column("no_such_column", ArrowColumn::Kind::kString), core::Error);

  const auto tmp = std::filesystem::temp_directory_path() / "tandem_arrow_truncated.arrow";
  std::string bytes = core::read_file(file);
  for (std::size_t keep : {std::size_t{6}, std::size_t{100}, bytes.size() - 40}) {
    core::write_file_atomic(tmp.string(), bytes.substr(0, keep));
    try {
      read_arrow_stream(tmp.string());
      ADD_FAILURE() << "a stream cut at " << keep << " bytes was accepted";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(tmp.string()), std::string::npos) << e.what();
    }
  }
  std::string garbage(256, '\x11');
  core::write_file_atomic(tmp.string(), garbage);
  EXPECT_THROW(read_arrow_stream(tmp.string()), core::Error);
  std::filesystem::remove(tmp);
}

// state.json names the Arrow files: a name leading out of the folder is refused, and a wrong
// type is named instead of escaping as a library exception.
TEST(ArrowStream, DataFileNamesStayInsideTheFolder) {
  const auto dir = std::filesystem::temp_directory_path() / "tandem_arrow_state_names";
  std::filesystem::create_directories(dir);
  const std::string state = (dir / "state.json").string();
  auto error_of = [&](const std::string& json) {
    core::write_file_atomic(state, json);
    try {
      read_hf_dataset_dir(dir.string());
    } catch (const core::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"_data_files": [{"filename": "../outside.arrow"}]})").find("'..'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"_data_files": [{"filename": "/etc/passwd"}]})").find("absolute path"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"_data_files": [{"filename": 3}]})").find("field 'filename'"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::io
