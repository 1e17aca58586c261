// OLMo-core token files: headerless little-endian arrays of token ids (despite the .npy name).
// The dtype is the smallest unsigned type that holds vocab_size - 1; token count = size / itemsize.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace tandem::io {

enum class TokenDtype { kU8, kU16, kU32, kU64 };

TokenDtype token_dtype_for_vocab(std::uint64_t vocab_size);  // as OLMo-core chooses it
std::size_t token_dtype_size(TokenDtype dtype);
std::string token_dtype_name(TokenDtype dtype);             // "uint8" ... "uint64" (numpy names)
TokenDtype token_dtype_from_name(const std::string& name);  // throws core::Error on an unknown name

// Read-only view of one token file, read with pread rather than mapped: a file truncated or
// rewritten while a run reads it then gives an Error naming it, where a mapping would end the
// process with SIGBUS. Every read first checks that the file's size and modification time are
// still those seen at open.
class TokenFile {
 public:
  TokenFile(const std::string& path, TokenDtype dtype);  // throws if size % itemsize != 0
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  std::uint64_t num_tokens() const { return num_tokens_; }
  std::uint64_t size_bytes() const { return size_bytes_; }
  TokenDtype dtype() const { return dtype_; }
  const std::string& path() const { return path_; }
  std::uint64_t token(std::uint64_t index) const;
  // Copies tokens [start, start + count) into out (widened to uint32/int64 as asked).
  void read(std::uint64_t start, std::uint64_t count, std::uint32_t* out) const;
  void read(std::uint64_t start, std::uint64_t count, std::int64_t* out) const;
  // Calls visit(offset of the chunk's first token, its tokens) over the whole file, in order, in
  // chunks of up to 65,536 tokens (the scans: documents, id validation).
  void for_each_chunk(
      const std::function<void(std::uint64_t, std::span<const std::int64_t>)>& visit) const;
  // Raw little-endian bytes [offset, offset + n); throws if the file changed since it was opened.
  void read_bytes(std::uint64_t offset, std::size_t n, void* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  TokenDtype dtype_;
  std::uint64_t size_bytes_ = 0;
  std::int64_t mtime_ns_ = 0;
  std::uint64_t num_tokens_ = 0;
};

}  // namespace tandem::io
