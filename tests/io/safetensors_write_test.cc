// Writer: bit-exact round trips, byte-identical output to the Python safetensors package for the
// same tensor order, atomic replacement, and refusal of bad input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "safetensors_test_util.h"
#include "tandem/io/safetensors.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

TEST(SafetensorsWrite, RoundTripsBitExactly) {
  std::string dir = testing::scratch_dir();
  std::string path = dir + "/round.safetensors";
  std::vector<float> f32 = {1.5f, -0.0f, std::bit_cast<float>(0x7FC00123u), INFINITY, 1e-45f, 3.0f};
  std::vector<std::uint16_t> bf16 = {0x3F80, 0x7FC1, 0x8001, 0xFF80, 0x1234};
  std::vector<std::uint16_t> f16 = {0x3C00, 0x7E01, 0x0001, 0xFC00};
  float scalar = 2.25f;
  std::vector<io::TensorToWrite> tensors = {
      {"z.f32", io::DType::kF32, {2, 3}, f32.data()},
      {"a.bf16", io::DType::kBF16, {5}, bf16.data()},
      {"m.f16", io::DType::kF16, {2, 1, 2}, f16.data()},
      {"empty", io::DType::kBF16, {0, 7}, nullptr},
      {"scalar", io::DType::kF32, {}, &scalar},
  };
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  io::write_safetensors(path, tensors, metadata);

  io::SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"a.bf16", "empty", "m.f16", "scalar", "z.f32"}));
  EXPECT_EQ(file.data_offset() % 8, 0u);
  std::uint64_t offset = 0;
  for (const io::TensorToWrite& t : tensors) {  // laid out in the given order
    const io::TensorInfo& info = file.info(t.name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    EXPECT_EQ(info.begin, offset);
    offset = info.end;
    auto raw = file.raw(t.name);
    ASSERT_EQ(raw.size(), info.numel() * io::dtype_size(t.dtype));
    if (!raw.empty()) {
      EXPECT_EQ(std::memcmp(raw.data(), t.data, raw.size()), 0) << t.name;
    }
  }
  // The header is padded with spaces, as the Rust library does.
  std::string bytes = core::read_file(path);
  std::string header = bytes.substr(8, file.data_offset() - 8);
  EXPECT_EQ(header.back() == ' ' || header.back() == '}', true);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  fs::remove_all(dir);
}

TEST(SafetensorsWrite, SameBytesAsPythonSafetensors) {
  std::string reference_path = testing::io_fixture("python_written.safetensors");
  io::SafetensorsFile reference(reference_path);
  auto order =
      nlohmann::json::parse(core::read_file(testing::io_fixture("python_written.json")))["order"]
          .get<std::vector<std::string>>();
  ASSERT_EQ(order.size(), reference.names().size());
  std::vector<io::TensorToWrite> tensors;
  for (const std::string& name : order) {
    const io::TensorInfo& info = reference.info(name);
    tensors.push_back({name, info.dtype, info.shape, reference.raw(name).data()});
  }
  std::string dir = testing::scratch_dir();
  std::string path = dir + "/ours.safetensors";
  io::write_safetensors(path, tensors, reference.metadata());
  EXPECT_EQ(core::read_file(path), core::read_file(reference_path));
  fs::remove_all(dir);
}

TEST(SafetensorsWrite, ReplacesAtomicallyAndLeavesNoTemporaries) {
  std::string dir = testing::scratch_dir();
  std::string path = dir + "/w.safetensors";
  std::vector<float> a = {1, 2, 3};
  io::write_safetensors(path, {{"a", io::DType::kF32, {3}, a.data()}});
  std::vector<float> b = {4, 5};
  io::write_safetensors(path, {{"b", io::DType::kF32, {2}, b.data()}});
  EXPECT_EQ(io::SafetensorsFile(path).names(), std::vector<std::string>{"b"});
  // A refused write keeps the previous file whole.
  testing::expect_error(
      [&] {
        io::write_safetensors(
            path, {{"x", io::DType::kF32, {2}, b.data()}, {"x", io::DType::kF32, {2}, b.data()}});
      },
      {path, "'x'", "twice"});
  EXPECT_EQ(io::SafetensorsFile(path).read_f32("b"), b);
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "w.safetensors");
  }
  EXPECT_EQ(entries, 1);
  fs::remove_all(dir);
}

TEST(SafetensorsWrite, RefusesBadTensors) {
  std::string dir = testing::scratch_dir();
  std::string path = dir + "/bad.safetensors";
  float v = 1;
  testing::expect_error(
      [&] {
        io::write_safetensors(path, {{"neg", io::DType::kF32, {2, -1}, &v}});
      },
      {path, "neg", "negative"});
  testing::expect_error(
      [&] {
        io::write_safetensors(path, {{"null", io::DType::kF32, {4}, nullptr}});
      },
      {path, "null", "no data"});
  testing::expect_error(
      [&] {
        io::write_safetensors(path, {{"__metadata__", io::DType::kF32, {}, &v}});
      },
      {path, "__metadata__"});
  testing::expect_error(
      [&] {
        io::write_safetensors(path, {{"", io::DType::kF32, {}, &v}});
      },
      {path});
  testing::expect_error(
      [&] {
        io::write_safetensors(path, {{"bad\xff", io::DType::kF32, {}, &v}});
      },
      {path, "UTF-8"});
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
