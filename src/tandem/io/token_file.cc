#include "tandem/io/token_file.h"

#include <cstring>

#include "tandem/core/error.h"

namespace tandem::io {

TokenDtype token_dtype_for_vocab(std::uint64_t vocab_size) {
  TANDEM_CHECK(vocab_size > 0, "vocab size must be positive");
  std::uint64_t max_id = vocab_size - 1;
  if (max_id <= 0xFFull) return TokenDtype::kU8;
  if (max_id <= 0xFFFFull) return TokenDtype::kU16;
  if (max_id <= 0xFFFFFFFFull) return TokenDtype::kU32;
  return TokenDtype::kU64;
}

std::size_t token_dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kU8:
      return 1;
    case TokenDtype::kU16:
      return 2;
    case TokenDtype::kU32:
      return 4;
    case TokenDtype::kU64:
      return 8;
  }
  return 0;
}

std::string token_dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kU8:
      return "uint8";
    case TokenDtype::kU16:
      return "uint16";
    case TokenDtype::kU32:
      return "uint32";
    case TokenDtype::kU64:
      return "uint64";
  }
  return "?";
}

TokenDtype token_dtype_from_name(const std::string& name) {
  for (TokenDtype d : {TokenDtype::kU8, TokenDtype::kU16, TokenDtype::kU32, TokenDtype::kU64})
    if (token_dtype_name(d) == name) return d;
  core::fail("unknown token dtype '{}' (expected uint8, uint16, uint32 or uint64)", name);
}

TokenFile::TokenFile(const std::string& path, TokenDtype dtype) : file_(path), dtype_(dtype) {
  std::size_t item = token_dtype_size(dtype);
  TANDEM_CHECK(file_.size() % item == 0,
               "{}: size {} bytes is not a multiple of the {} item size ({} bytes)", path,
               file_.size(), token_dtype_name(dtype), item);
  num_tokens_ = file_.size() / item;
}

std::uint64_t TokenFile::token(std::uint64_t i) const {
  TANDEM_CHECK(i < num_tokens_, "{}: token index {} out of range ({} tokens)", path(), i,
               num_tokens_);
  const std::uint8_t* p = file_.data() + i * token_dtype_size(dtype_);
  switch (dtype_) {
    case TokenDtype::kU8:
      return *p;
    case TokenDtype::kU16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case TokenDtype::kU32: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case TokenDtype::kU64: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
  return 0;
}

namespace {
template <typename Out>
void read_widened(const TokenFile& f, std::uint64_t start, std::uint64_t count, Out* out) {
  TANDEM_CHECK(start + count <= f.num_tokens(), "{}: read of [{}, {}) past the end ({} tokens)",
               f.path(), start, start + count, f.num_tokens());
  const std::uint8_t* base = f.mapped().data();
  switch (f.dtype()) {
    case TokenDtype::kU8:
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<Out>(base[start + i]);
      break;
    case TokenDtype::kU16: {
      const std::uint16_t* p = reinterpret_cast<const std::uint16_t*>(base) + start;
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<Out>(p[i]);
      break;
    }
    case TokenDtype::kU32: {
      const std::uint32_t* p = reinterpret_cast<const std::uint32_t*>(base) + start;
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<Out>(p[i]);
      break;
    }
    case TokenDtype::kU64: {
      const std::uint64_t* p = reinterpret_cast<const std::uint64_t*>(base) + start;
      for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<Out>(p[i]);
      break;
    }
  }
}
}  // namespace

void TokenFile::read(std::uint64_t start, std::uint64_t count, std::uint32_t* out) const {
  read_widened(*this, start, count, out);
}
void TokenFile::read(std::uint64_t start, std::uint64_t count, std::int64_t* out) const {
  read_widened(*this, start, count, out);
}

}  // namespace tandem::io
