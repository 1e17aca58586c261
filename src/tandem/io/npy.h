// .npy arrays (format 1.0/2.0/3.0, C order, little-endian) for exchanging ids and logits with
// numpy-based tools.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::io {

enum class NpyDtype { kF32, kF64, kI32, kI64, kU16, kU32, kU64, kU8 };

struct NpyArray {
  NpyDtype dtype = NpyDtype::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // raw little-endian data, C order

  std::int64_t numel() const;
  std::size_t item_size() const;
  // Converting accessors; throw Error naming the file if the dtype cannot convert exactly.
  std::vector<float> as_f32() const;
  std::vector<std::int64_t> as_i64() const;
  std::string source;  // path it was read from, for messages
};

NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, NpyDtype dtype, const std::vector<std::int64_t>& shape,
               const void* data);
void write_npy_f32(const std::string& path, const std::vector<std::int64_t>& shape,
                   const float* data);
void write_npy_i64(const std::string& path, const std::vector<std::int64_t>& shape,
                   const std::int64_t* data);

}  // namespace tandem::io
