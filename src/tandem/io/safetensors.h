// safetensors reading (memory-mapped, fully validated header) and writing (atomic), including HF
// sharded checkpoints (model.safetensors.index.json).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/mapped_file.h"

namespace tandem::io {

enum class DType { kF32, kBF16, kF16 };
std::string dtype_name(DType dtype);  // "F32", "BF16", "F16" (safetensors spelling)
std::size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

// One .safetensors file. The constructor validates everything and throws tandem::core::Error naming
// the file (and tensor) on: a file shorter than 8 bytes, a header length past the end or above 100
// MB, invalid JSON, an unknown dtype, shape x dtype size != byte span, spans out of bounds,
// overlapping or not contiguous (with no gaps) from 0 to the end of the file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws naming the tensor and file
  std::vector<std::string> names() const;                 // sorted
  std::span<const std::uint8_t> raw(const std::string& name) const;
  // Reads a tensor converted to fp32 (BF16/F16 widened exactly).
  std::vector<float> read_f32(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Additions. Converts into caller memory; `out` must hold exactly numel() floats.
  void read_f32_into(const std::string& name, std::span<float> out) const;
  // Elements [start, start + out.size()) of the flattened tensor, converted (only those bytes of
  // the mapping are read: a rank's part of a large tensor).
  void read_f32_range_into(const std::string& name, std::int64_t start, std::span<float> out) const;
  // Tensors whose dtype is valid safetensors but not F32/BF16/F16 (e.g. I64) are listed by
  // names() and has(), but info/raw/read throw naming the dtype. This gives that dtype's spelling,
  // or "" for a supported tensor.
  std::string unsupported_dtype(const std::string& name) const;
  std::uint64_t data_offset() const { return data_offset_; }  // start of the data section

 private:
  void parse_header();
  const TensorInfo& supported_info(const std::string& name) const;

  core::MappedFile file_;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> unsupported_;  // tensor -> dtype spelling
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory or file: a single model.safetensors, or an HF sharded one described by
// model.safetensors.index.json (weight_map: tensor -> shard file). Also accepts a path to one
// .safetensors file. Validates that every indexed tensor exists in its shard.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  std::vector<float> read_f32(const std::string& name) const;
  // Raw bytes and dtype (for bit-exact copies).
  std::span<const std::uint8_t> raw(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;

  // Additions.
  void read_f32_into(const std::string& name, std::span<float> out) const;
  void read_f32_range_into(const std::string& name, std::int64_t start, std::span<float> out) const;
  const std::string& path() const { return path_; }
  std::size_t num_files() const { return files_.size(); }

 private:
  void open_index(const std::string& dir, const std::string& index_path);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> owner_;  // tensor -> index into files_
  std::string path_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;  // numel * dtype_size bytes, already in `dtype`
};

// Writes one .safetensors file atomically (temp + fsync + rename); tensors laid out in the given
// order, header padded to 8 bytes. Metadata goes under "__metadata__".
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Number conversions used by readers/writers (round-to-nearest-even for narrowing).
float bf16_to_f32(std::uint16_t v);
std::uint16_t f32_to_bf16(float v);
float f16_to_f32(std::uint16_t v);
std::uint16_t f32_to_f16(float v);

}  // namespace tandem::io
