#include "tandem/io/token_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

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

namespace {

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

TokenFile::TokenFile(const std::string& path, TokenDtype dtype) : path_(path), dtype_(dtype) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0 && errno == EMFILE) {
    // Every token file holds a descriptor while the data is open; AI2's mixes list thousands.
    struct rlimit lim {};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    core::fail(
        "cannot open token file {}: too many open files (this process may hold {}, at most {}; "
        "the data keeps one open per distinct token file: raise `ulimit -n`)",
        path, static_cast<std::uint64_t>(lim.rlim_cur), static_cast<std::uint64_t>(lim.rlim_max));
  }
  if (fd_ < 0) core::fail("cannot open token file {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    core::fail("token file {} is not a regular file{}", path,
               err ? std::string(": ") + std::strerror(err) : std::string());
  }
  size_bytes_ = static_cast<std::uint64_t>(st.st_size);
  mtime_ns_ = mtime_ns(st);
  std::size_t item = token_dtype_size(dtype);
  if (size_bytes_ % item != 0) {
    ::close(fd_);
    fd_ = -1;
    core::fail("{}: size {} bytes is not a multiple of the {} item size ({} bytes)", path,
               size_bytes_, token_dtype_name(dtype), item);
  }
  num_tokens_ = size_bytes_ / item;
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read_bytes(std::uint64_t offset, std::size_t n, void* out) const {
  TANDEM_CHECK(offset <= size_bytes_ && n <= size_bytes_ - offset,
               "{}: read of bytes [{}, {}) past the end ({} bytes)", path_, offset, offset + n,
               size_bytes_);
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    core::fail("cannot stat token file {}: {}", path_, std::strerror(errno));
  if (static_cast<std::uint64_t>(st.st_size) != size_bytes_ || mtime_ns(st) != mtime_ns_) {
    core::fail(
        "token file {} changed while it was being read (it was {} bytes, it is now {}{}): the "
        "data order of this run no longer matches it; restore it, or start a new run",
        path_, size_bytes_, st.st_size, mtime_ns(st) != mtime_ns_ ? ", and was rewritten" : "");
  }
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) core::fail("cannot read token file {}: {}", path_, std::strerror(errno));
    if (got == 0)
      core::fail(
          "token file {} ends at byte {}, before the {} bytes it had when opened: it was "
          "truncated during the run",
          path_, offset, size_bytes_);
    dst += got;
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
}

std::uint64_t TokenFile::token(std::uint64_t i) const {
  TANDEM_CHECK(i < num_tokens_, "{}: token index {} out of range ({} tokens)", path(), i,
               num_tokens_);
  const std::size_t item = token_dtype_size(dtype_);
  std::uint64_t v = 0;  // little-endian: the low bytes of a uint64
  read_bytes(i * item, item, &v);
  return v;
}

namespace {
template <typename In, typename Out>
void widen(const std::uint8_t* src, std::uint64_t n, Out* out) {
  for (std::uint64_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, src + i * sizeof(In), sizeof(In));
    out[i] = static_cast<Out>(v);
  }
}

template <typename Out>
void read_widened(const TokenFile& f, std::uint64_t start, std::uint64_t count, Out* out) {
  TANDEM_CHECK(start <= f.num_tokens() && count <= f.num_tokens() - start,
               "{}: read of [{}, {}) past the end ({} tokens)", f.path(), start, start + count,
               f.num_tokens());
  const std::size_t item = token_dtype_size(f.dtype());
  // Blocks of 64K tokens through a scratch buffer, each id widened from its little-endian bytes.
  constexpr std::uint64_t kBlock = 1 << 16;
  thread_local std::vector<std::uint8_t> scratch;  // reused: no allocation per instance
  for (std::uint64_t done = 0; done < count;) {
    const std::uint64_t n = std::min(kBlock, count - done);
    scratch.resize(static_cast<std::size_t>(n * item));
    f.read_bytes((start + done) * item, scratch.size(), scratch.data());
    Out* dst = out + done;
    switch (f.dtype()) {
      case TokenDtype::kU8:
        widen<std::uint8_t>(scratch.data(), n, dst);
        break;
      case TokenDtype::kU16:
        widen<std::uint16_t>(scratch.data(), n, dst);
        break;
      case TokenDtype::kU32:
        widen<std::uint32_t>(scratch.data(), n, dst);
        break;
      case TokenDtype::kU64:
        widen<std::uint64_t>(scratch.data(), n, dst);
        break;
    }
    done += n;
  }
}
}  // namespace

void TokenFile::read(std::uint64_t start, std::uint64_t count, std::uint32_t* out) const {
  read_widened(*this, start, count, out);
}
void TokenFile::read(std::uint64_t start, std::uint64_t count, std::int64_t* out) const {
  read_widened(*this, start, count, out);
}

void TokenFile::for_each_chunk(
    const std::function<void(std::uint64_t, std::span<const std::int64_t>)>& visit) const {
  constexpr std::uint64_t kChunk = 1 << 16;
  std::vector<std::int64_t> chunk;
  for (std::uint64_t base = 0; base < num_tokens_; base += kChunk) {
    chunk.resize(std::min(kChunk, num_tokens_ - base));
    read(base, chunk.size(), chunk.data());
    visit(base, chunk);
  }
}

}  // namespace tandem::io
