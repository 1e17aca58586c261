// Reading files written by the Python safetensors package (and huggingface_hub's sharding):
// names, dtypes, shapes, metadata, raw bytes and fp32 values all match what Python recorded.
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "safetensors_test_util.h"
#include "tandem/core/hash.h"
#include "tandem/io/safetensors.h"

namespace tandem {
namespace {

nlohmann::json load_json(const std::string& path) {
  return nlohmann::json::parse(core::read_file(path));
}

std::string safetensors_dtype(const std::string& torch_dtype) {
  if (torch_dtype == "float32") return "F32";
  if (torch_dtype == "bfloat16") return "BF16";
  if (torch_dtype == "float16") return "F16";
  return "";
}

// Checks one tensor against its entry in a *.expected.json written by the fixture tool.
void expect_matches(const io::SafetensorsFile& file, const std::string& name,
                    const nlohmann::json& expected) {
  SCOPED_TRACE(name);
  const io::TensorInfo& info = file.info(name);
  EXPECT_EQ(io::dtype_name(info.dtype), safetensors_dtype(expected["dtype"]));
  EXPECT_EQ(info.shape, expected["shape"].get<std::vector<std::int64_t>>());
  EXPECT_EQ(info.end - info.begin, info.numel() * io::dtype_size(info.dtype));
  EXPECT_EQ(core::sha256_hex(file.raw(name)), expected["raw_sha256"].get<std::string>());
  std::vector<float> values = file.read_f32(name);
  auto want = expected["f32_bits"].get<std::vector<std::uint32_t>>();
  ASSERT_EQ(values.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(values[i]), want[i]) << "element " << i;
  }
  if (expected.contains("u16_bits")) {
    auto raw = file.raw(name);
    auto bits = expected["u16_bits"].get<std::vector<std::uint16_t>>();
    ASSERT_EQ(raw.size(), 2 * bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      EXPECT_EQ(raw[2 * i] | (raw[2 * i + 1] << 8), bits[i]);
    }
  }
}

TEST(SafetensorsRead, MixedDtypesFromPython) {
  io::SafetensorsFile file(testing::io_fixture("mixed.safetensors"));
  nlohmann::json expected = load_json(testing::io_fixture("mixed.expected.json"));
  std::vector<std::string> names;
  for (const auto& [name, unused] : expected["tensors"].items()) names.push_back(name);
  EXPECT_EQ(file.names(), names);  // both sorted
  EXPECT_EQ(file.metadata(), (expected["metadata"].get<std::map<std::string, std::string>>()));
  EXPECT_EQ(file.data_offset() % 8, 0u);
  for (const auto& [name, entry] : expected["tensors"].items()) {
    if (safetensors_dtype(entry["dtype"]).empty()) continue;
    expect_matches(file, name, entry);
  }
  EXPECT_EQ(file.info("scalar").shape.size(), 0u);
  EXPECT_EQ(file.info("scalar").numel(), 1);
  EXPECT_EQ(file.read_f32("scalar"), std::vector<float>{3.5f});
  EXPECT_EQ(file.info("empty").numel(), 0);
  EXPECT_TRUE(file.read_f32("empty").empty());
}

TEST(SafetensorsRead, UnsupportedDtypeIsListedButNotRead) {
  std::string path = testing::io_fixture("mixed.safetensors");
  io::SafetensorsFile file(path);
  EXPECT_TRUE(file.has("i64_ids"));
  EXPECT_EQ(file.unsupported_dtype("i64_ids"), "I64");
  EXPECT_EQ(file.unsupported_dtype("f32_matrix"), "");
  testing::expect_error([&] { file.read_f32("i64_ids"); }, {path, "i64_ids", "I64"});
  testing::expect_error([&] { file.raw("i64_ids"); }, {path, "i64_ids", "I64"});
  testing::expect_error([&] { file.info("i64_ids"); }, {path, "i64_ids", "I64"});
}

TEST(SafetensorsRead, MissingTensorAndWrongDestinationSize) {
  std::string path = testing::io_fixture("mixed.safetensors");
  io::SafetensorsFile file(path);
  EXPECT_FALSE(file.has("nope"));
  testing::expect_error([&] { file.info("nope"); }, {path, "nope"});
  testing::expect_error([&] { file.read_f32("nope"); }, {path, "nope"});
  std::vector<float> small(3);
  testing::expect_error([&] { file.read_f32_into("f32_matrix", small); },
                        {path, "f32_matrix", "15"});
}

TEST(SafetensorsCheckpoint, ShardedFromHuggingfaceHub) {
  std::string dir = testing::io_fixture("sharded");
  io::SafetensorsCheckpoint checkpoint(dir);
  nlohmann::json expected = load_json(testing::io_fixture("sharded.expected.json"));
  EXPECT_EQ(checkpoint.num_files(), 2u);
  std::vector<std::string> names;
  for (const auto& [name, unused] : expected["tensors"].items()) names.push_back(name);
  EXPECT_EQ(checkpoint.names(), names);
  for (const auto& [name, entry] : expected["tensors"].items()) {
    ASSERT_TRUE(checkpoint.has(name));
    const io::SafetensorsFile& file = checkpoint.file_of(name);
    EXPECT_EQ(std::filesystem::path(file.path()).filename(), entry["shard"].get<std::string>());
    expect_matches(file, name, entry);
    EXPECT_EQ(checkpoint.info(name).shape, entry["shape"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(checkpoint.raw(name).data(), file.raw(name).data());
    std::vector<float> values(static_cast<std::size_t>(checkpoint.info(name).numel()));
    checkpoint.read_f32_into(name, values);
    EXPECT_EQ(values, checkpoint.read_f32(name));
  }
  testing::expect_error([&] { checkpoint.info("model.missing"); }, {dir, "model.missing"});
}

TEST(SafetensorsCheckpoint, SingleFileAndDirectoryWithModelSafetensors) {
  std::string source = testing::io_fixture("mixed.safetensors");
  io::SafetensorsCheckpoint from_file(source);
  EXPECT_EQ(from_file.num_files(), 1u);
  EXPECT_EQ(from_file.names(), io::SafetensorsFile(source).names());

  std::string dir = testing::scratch_dir();
  std::filesystem::copy_file(source, dir + "/model.safetensors");
  io::SafetensorsCheckpoint from_dir(dir);
  EXPECT_EQ(from_dir.names(), from_file.names());
  EXPECT_EQ(from_dir.read_f32("bf16_vec"), from_file.read_f32("bf16_vec"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
