#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/io/npy.h"

namespace tandem {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tandem_core_" + name)).string();
}

TEST(Npy, RoundTripsShapesAndDtypes) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::string p = temp_path("a.npy");
  write_npy_f32(p, {2, 3}, v.data());
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.as_f32(), v);
  std::vector<std::int64_t> ids = {5, 100277};
  write_npy_i64(p, {2}, ids.data());
  EXPECT_EQ(read_npy(p).as_i64(), ids);
  std::remove(p.c_str());
}

TEST(Npy, RejectsTruncatedAndNonNpy) {
  std::string p = temp_path("bad.npy");
  std::vector<float> v(10, 1.0f);
  write_npy_f32(p, {10}, v.data());
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 4);
  EXPECT_THROW(read_npy(p), Error);
  write_file_atomic(p, "hello, not numpy");
  try {
    read_npy(p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
  std::remove(p.c_str());
}

TEST(Hash, KnownSha256) {
  EXPECT_EQ(sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AtomicFile, UncommittedWriteLeavesNoFile) {
  std::string p = temp_path("atomic.txt");
  std::remove(p.c_str());
  {
    AtomicFileWriter w(p);
    w.write("partial");
  }
  EXPECT_FALSE(std::filesystem::exists(p));
  write_file_atomic(p, "done");
  EXPECT_EQ(read_file(p), "done");
  std::remove(p.c_str());
}

}  // namespace
}  // namespace tandem
