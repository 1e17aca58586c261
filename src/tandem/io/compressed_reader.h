// Streaming readers for plain, gzip (.gz) and zstd (.zst/.zstd) files, chosen by extension.
// Corrupt or truncated compressed streams throw tandem::core::Error naming the file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace tandem::io {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes; returns 0 only at the (verified complete) end of the stream.
  virtual std::size_t read(char* buffer, std::size_t n) = 0;
  const std::string& path() const { return path_; }

 protected:
  explicit ByteSource(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

std::unique_ptr<ByteSource> open_byte_source(const std::string& path);
std::string read_all(ByteSource& source);
bool is_compressed_path(const std::string& path);
// The path without a trailing .gz/.zst/.zstd.
std::string strip_compression_suffix(const std::string& path);

// Splits a byte source into lines ('\n' removed; a trailing '\r' is kept as part of the text).
class LineReader {
 public:
  static constexpr std::size_t kMaxLineBytes = std::size_t{1} << 30;
  explicit LineReader(ByteSource& source, std::size_t max_line_bytes = kMaxLineBytes)
      : source_(source), max_line_bytes_(max_line_bytes) {}
  bool next(std::string& line);
  std::uint64_t line_number() const { return line_number_; }  // of the line last returned (1-based)

 private:
  ByteSource& source_;
  std::size_t max_line_bytes_;
  std::string buffer_;
  std::size_t pos_ = 0;
  std::size_t scanned_ = 0;  // bytes of buffer_ already searched for '\n'
  bool eof_ = false;
  std::uint64_t line_number_ = 0;
};

}  // namespace tandem::io
