// Read-only memory-mapped file (RAII). Large token and weight files are read through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tandem::core {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tandem::core
