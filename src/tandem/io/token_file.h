// OLMo-core token files: headerless little-endian arrays of token ids (despite the .npy name).
// The dtype is the smallest unsigned type that holds vocab_size - 1; token count = size / itemsize.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/core/mapped_file.h"

namespace tandem::io {

enum class TokenDtype { kU8, kU16, kU32, kU64 };

TokenDtype token_dtype_for_vocab(std::uint64_t vocab_size);  // as OLMo-core chooses it
std::size_t token_dtype_size(TokenDtype dtype);
std::string token_dtype_name(TokenDtype dtype);             // "uint8" ... "uint64" (numpy names)
TokenDtype token_dtype_from_name(const std::string& name);  // throws Error on an unknown name

// Read-only, memory-mapped view of one token file.
class TokenFile {
 public:
  TokenFile(const std::string& path, TokenDtype dtype);  // throws if size % itemsize != 0
  std::uint64_t num_tokens() const { return num_tokens_; }
  TokenDtype dtype() const { return dtype_; }
  const std::string& path() const { return file_.path(); }
  std::uint64_t token(std::uint64_t index) const;
  // Copies tokens [start, start + count) into out (widened to uint32/int64 as asked).
  void read(std::uint64_t start, std::uint64_t count, std::uint32_t* out) const;
  void read(std::uint64_t start, std::uint64_t count, std::int64_t* out) const;
  const core::MappedFile& mapped() const { return file_; }

 private:
  core::MappedFile file_;
  TokenDtype dtype_;
  std::uint64_t num_tokens_ = 0;
};

}  // namespace tandem::io
