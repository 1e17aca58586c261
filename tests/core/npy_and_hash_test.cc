#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/io/npy.h"

namespace tandem {
namespace {

std::string temp_path(const std::string& name) {
  return tandem::testing::temp_dir("core") + "/" + name;
}

TEST(Npy, RoundTripsShapesAndDtypes) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::string p = temp_path("a.npy");
  io::write_npy_f32(p, {2, 3}, v.data());
  io::NpyArray a = io::read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.as_f32(), v);
  std::vector<std::int64_t> ids = {5, 100277};
  io::write_npy_i64(p, {2}, ids.data());
  EXPECT_EQ(io::read_npy(p).as_i64(), ids);
  std::remove(p.c_str());
}

TEST(Npy, RejectsTruncatedAndNonNpy) {
  std::string p = temp_path("bad.npy");
  std::vector<float> v(10, 1.0f);
  io::write_npy_f32(p, {10}, v.data());
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 4);
  EXPECT_THROW(io::read_npy(p), core::Error);
  core::write_file_atomic(p, "hello, not numpy");
  try {
    io::read_npy(p);
    FAIL() << "expected an error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
  std::remove(p.c_str());
}

TEST(Hash, KnownSha256) {
  EXPECT_EQ(core::sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AtomicFile, UncommittedWriteLeavesNoFile) {
  std::string p = temp_path("atomic.txt");
  std::remove(p.c_str());
  {
    core::AtomicFileWriter w(p);
    w.write("partial");
  }
  EXPECT_FALSE(std::filesystem::exists(p));
  core::write_file_atomic(p, "done");
  EXPECT_EQ(core::read_file(p), "done");
  std::remove(p.c_str());
}

}  // namespace
}  // namespace tandem
