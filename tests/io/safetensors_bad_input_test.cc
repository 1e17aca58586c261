// Bad safetensors files and checkpoints: each is refused with a tandem::core::Error naming the file
// and, where one is at fault, the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "safetensors_test_util.h"
#include "tandem/io/safetensors.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

class BadSafetensors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir(); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a file with this header and data size; returns its path.
  std::string make(const std::string& header, std::size_t data_bytes) {
    std::string path = dir_ + "/t" + std::to_string(count_++) + ".safetensors";
    core::write_file_atomic(path, testing::safetensors_bytes(header, data_bytes));
    return path;
  }
  void expect_rejected(const std::string& header, std::size_t data_bytes,
                       std::initializer_list<std::string> parts) {
    std::string path = make(header, data_bytes);
    SCOPED_TRACE(header);
    std::vector<std::string> all(parts);
    all.push_back(path);
    try {
      io::SafetensorsFile file(path);
      ADD_FAILURE() << "accepted a bad file";
    } catch (const core::Error& e) {
      for (const std::string& part : all) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "message lacks '" << part << "': " << e.what();
      }
    }
  }

  std::string dir_;
  int count_ = 0;
};

TEST_F(BadSafetensors, TooShortOrEmpty) {
  std::string path = dir_ + "/short.safetensors";
  core::write_file_atomic(path, "abc");
  expect_error([&] { io::SafetensorsFile f(path); }, {path, "shorter than the 8-byte"});
  core::write_file_atomic(path, "");
  expect_error([&] { io::SafetensorsFile f(path); }, {path, "0 bytes"});
  expect_error([&] { io::SafetensorsFile f(dir_ + "/absent.safetensors"); },
               {"absent.safetensors"});
}

TEST_F(BadSafetensors, TruncatedInHeaderAndInData) {
  std::string source = testing::io_fixture("mixed.safetensors");
  io::SafetensorsFile whole(source);
  std::string last_tensor;
  std::uint64_t last_end = 0;
  for (const std::string& name : whole.names()) {
    if (!whole.unsupported_dtype(name).empty()) continue;
    if (whole.info(name).end > last_end) {
      last_end = whole.info(name).end;
      last_tensor = name;
    }
  }
  std::string bytes = core::read_file(source);
  std::string in_header = dir_ + "/cut_header.safetensors";
  core::write_file_atomic(in_header, bytes.substr(0, whole.data_offset() / 2));
  expect_error([&] { io::SafetensorsFile f(in_header); },
               {in_header, "runs past the end of the file"});

  std::string in_data = dir_ + "/cut_data.safetensors";
  core::write_file_atomic(in_data, bytes.substr(0, bytes.size() - 3));
  // i64_ids is last in the file; either it or the last float tensor ends past the cut.
  expect_error([&] { io::SafetensorsFile f(in_data); }, {in_data, "run past the end of the data"});
  std::string cut_before_last = dir_ + "/cut_more.safetensors";
  core::write_file_atomic(cut_before_last, bytes.substr(0, whole.data_offset() + last_end - 1));
  expect_error([&] { io::SafetensorsFile f(cut_before_last); },
               {cut_before_last, "'" + last_tensor + "'", "run past the end of the data"});
}

TEST_F(BadSafetensors, AbsurdHeaderLength) {
  std::string path = dir_ + "/absurd.safetensors";
  std::string bytes = testing::safetensors_bytes("{}", 0);
  std::uint64_t huge = 0x7FFFFFFFFFFFFFFFull;
  std::memcpy(bytes.data(), &huge, 8);
  core::write_file_atomic(path, bytes);
  expect_error([&] { io::SafetensorsFile f(path); }, {path, "header length", "limit"});
  std::uint64_t big = 150'000'000;
  std::memcpy(bytes.data(), &big, 8);
  core::write_file_atomic(path, bytes);
  expect_error([&] { io::SafetensorsFile f(path); }, {path, "150000000", "limit"});
}

TEST_F(BadSafetensors, MalformedJson) {
  expect_rejected(R"({"a": {"dtype": "F32", )", 0, {"invalid JSON"});
  expect_rejected(R"({"a": 1} trailing)", 0, {"invalid JSON"});
  expect_rejected(R"([1, 2])", 0, {"does not start with"});
  expect_rejected("{\"a\xff\": {}}", 0, {"invalid JSON"});
  expect_rejected(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, {"'w'", "twice"});
}

TEST_F(BadSafetensors, BadEntries) {
  expect_rejected(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4,
                  {"'w'", "unknown dtype 'F33'"});
  expect_rejected(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype"});
  expect_rejected(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                  {"'w'", "shape entry -1"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                  {"'w'", "shape entry 1.5"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4, {"'w'", "shape"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"'w'", "data_offsets"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
                  {"'w'", "data_offsets"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4,
                  {"'w'", "end before"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4,
                  {"'w'", "unknown key 'extra'"});
  expect_rejected(R"({"w":[1,2]})", 0, {"'w'", "expected an object"});
  expect_rejected(R"({"__metadata__":{"k":1}})", 0, {"__metadata__", "'k'"});
  expect_rejected(R"({"__metadata__":[]})", 0, {"__metadata__"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})",
                  4, {"'w'", "too many elements"});
}

TEST_F(BadSafetensors, ShapeAndSpanMismatch) {
  expect_rejected(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
                  {"'w'", "needs 12 bytes", "span 8"});
  expect_rejected(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16,
                  {"'w'", "BF16", "needs 8 bytes"});
  // A dtype tandem does not read is still checked.
  expect_rejected(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", 8,
                  {"'ids'", "I64", "needs 16 bytes"});
  expect_rejected(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
                  {"'w'", "whole bytes"});
}

TEST_F(BadSafetensors, OverlapsGapsAndUncoveredBytes) {
  expect_rejected(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12, {"'b'", "overlap tensor 'a'"});
  expect_rejected(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      8, {"overlap"});
  expect_rejected(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
      16, {"'b'", "gap of 4", "'a'"});
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12,
                  {"'a'", "gap of 4", "start"});
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12,
                  {"4 bytes at the end", "no tensor"});
  expect_rejected(R"({})", 4, {"4 bytes at the end"});
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8,
                  {"'a'", "run past the end of the data section"});
}

TEST_F(BadSafetensors, ValidEdgeCasesAreAccepted) {
  // Empty file body, zero-size tensors sharing an offset, trailing-space padding.
  EXPECT_NO_THROW(io::SafetensorsFile f(make("{}", 0)));
  EXPECT_NO_THROW(io::SafetensorsFile f(make(
      R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"F16","shape":[0,3],"data_offsets":[4,4]}}   )",
      4)));
}

class BadCheckpoint : public BadSafetensors {
 protected:
  // A copy of the 2-shard fixture that a test may damage.
  std::string copy_sharded() {
    std::string out = dir_ + "/ckpt";
    fs::copy(testing::io_fixture("sharded"), out);
    return out;
  }
  nlohmann::json index_of(const std::string& ckpt) {
    return nlohmann::json::parse(core::read_file(ckpt + "/model.safetensors.index.json"));
  }
  void set_index(const std::string& ckpt, const nlohmann::json& index) {
    core::write_file_atomic(ckpt + "/model.safetensors.index.json", index.dump(1));
  }
  static constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
  static constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
};

TEST_F(BadCheckpoint, IndexPointsToMissingShard) {
  std::string ckpt = copy_sharded();
  fs::remove(ckpt + "/" + kShard2);
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); },
               {"model.safetensors.index.json", kShard2, "lm_head.weight", "missing"});
}

TEST_F(BadCheckpoint, TensorMissingFromItsShard) {
  std::string ckpt = copy_sharded();
  nlohmann::json index = index_of(ckpt);
  index["weight_map"]["model.layers.1.mlp.up_proj.weight"] = kShard2;
  set_index(ckpt, index);
  expect_error(
      [&] { io::SafetensorsCheckpoint c(ckpt); },
      {"model.safetensors.index.json", "'model.layers.1.mlp.up_proj.weight'", kShard2, "missing"});
}

TEST_F(BadCheckpoint, IndexNamesTheWrongShard) {
  std::string ckpt = copy_sharded();
  nlohmann::json index = index_of(ckpt);
  index["weight_map"]["model.norm.weight"] = kShard2;
  set_index(ckpt, index);
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); },
               {"'model.norm.weight'", std::string("in shard ") + kShard2,
                std::string("it is in ") + kShard1});
  // When the shard that really holds it is no longer named at all, the tensor is missing.
  index["weight_map"]["model.norm.weight"] = kShard1;
  index["weight_map"]["lm_head.weight"] = kShard1;
  set_index(ckpt, index);
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); },
               {"'lm_head.weight'", kShard1, "missing"});
}

TEST_F(BadCheckpoint, TensorInTwoShards) {
  std::string ckpt = dir_ + "/two";
  fs::create_directories(ckpt);
  float v[2] = {1, 2};
  io::write_safetensors(ckpt + "/a.safetensors",
                        {{"w", io::DType::kF32, {2}, v}, {"x", io::DType::kF32, {1}, v}});
  io::write_safetensors(ckpt + "/b.safetensors", {{"w", io::DType::kF32, {2}, v}});
  set_index(ckpt, {{"weight_map", {{"w", "a.safetensors"}, {"x", "b.safetensors"}}}});
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); },
               {"'w'", "two shards", "a.safetensors", "b.safetensors"});
}

TEST_F(BadCheckpoint, ShardHoldsUnlistedTensor) {
  std::string ckpt = copy_sharded();
  nlohmann::json index = index_of(ckpt);
  index["weight_map"].erase("model.norm.weight");
  set_index(ckpt, index);
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); },
               {"'model.norm.weight'", kShard1, "does not list"});
}

TEST_F(BadCheckpoint, MalformedIndex) {
  std::string ckpt = copy_sharded();
  std::string index_path = ckpt + "/model.safetensors.index.json";
  core::write_file_atomic(index_path, "{\"weight_map\": {");
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {index_path, "invalid JSON"});
  set_index(ckpt, {{"metadata", {{"total_size", 1}}}});
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {index_path, "weight_map"});
  set_index(ckpt, {{"weight_map", nlohmann::json::object()}});
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {index_path, "no tensors"});
  set_index(ckpt, {{"weight_map", {{"w", 3}}}});
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {index_path, "'w'"});
  set_index(ckpt, {{"weight_map", {{"w", "../escape.safetensors"}}}});
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {index_path, "'w'", "escape"});
}

TEST_F(BadCheckpoint, CorruptShardIsNamed) {
  std::string ckpt = copy_sharded();
  std::string shard = ckpt + "/" + kShard2;
  std::string bytes = core::read_file(shard);
  core::write_file_atomic(shard, bytes.substr(0, bytes.size() - 2));
  expect_error([&] { io::SafetensorsCheckpoint c(ckpt); }, {shard, "lm_head.weight"});
}

TEST_F(BadCheckpoint, MissingPathOrEmptyDirectory) {
  expect_error([&] { io::SafetensorsCheckpoint c(dir_ + "/nothing"); },
               {"nothing", "does not exist"});
  expect_error([&] { io::SafetensorsCheckpoint c(dir_); },
               {dir_, "neither model.safetensors nor model.safetensors.index.json"});
}

}  // namespace
}  // namespace tandem
