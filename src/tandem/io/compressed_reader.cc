#include "tandem/io/compressed_reader.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::io {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : ByteSource(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) core::fail("cannot open input {}: {}", path, std::strerror(errno));
  }
  ~FileSource() override {
    if (fd_ >= 0) ::close(fd_);
  }
  std::size_t read(char* buffer, std::size_t n) override {
    while (true) {
      ssize_t r = ::read(fd_, buffer, n);
      if (r >= 0) return static_cast<std::size_t>(r);
      if (errno != EINTR) core::fail("cannot read input {}: {}", path_, std::strerror(errno));
    }
  }

 private:
  int fd_ = -1;
};

constexpr std::size_t kChunk = 1 << 18;

class GzipSource : public ByteSource {
 public:
  explicit GzipSource(const std::string& path) : ByteSource(path), file_(path), in_(kChunk) {
    std::memset(&z_, 0, sizeof(z_));
    if (inflateInit2(&z_, 15 + 32) != Z_OK) core::fail("{}: cannot initialise zlib", path);
  }
  ~GzipSource() override { inflateEnd(&z_); }
  std::size_t read(char* buffer, std::size_t n) override {
    z_.next_out = reinterpret_cast<Bytef*>(buffer);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n) {
      if (z_.avail_in == 0) {
        if (input_done_) {
          if (!stream_ended_)
            core::fail("{}: truncated gzip stream (ends in the middle of the data)", path_);
          return 0;
        }
        std::size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          input_done_ = true;
          continue;
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(got);
      }
      if (stream_ended_) {
        // Another gzip member follows (concatenated .gz files are valid).
        if (inflateReset(&z_) != Z_OK) core::fail("{}: zlib reset failed", path_);
        stream_ended_ = false;
      }
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        stream_ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        core::fail("{}: corrupt gzip data: {}", path_, z_.msg ? z_.msg : "error");
      }
    }
    return n - z_.avail_out;
  }

 private:
  FileSource file_;
  std::vector<char> in_;
  z_stream z_;
  bool input_done_ = false;
  bool stream_ended_ = false;
};

class ZstdSource : public ByteSource {
 public:
  explicit ZstdSource(const std::string& path) : ByteSource(path), file_(path), in_(kChunk) {
    stream_ = ZSTD_createDStream();
    if (!stream_) core::fail("{}: cannot initialise zstd", path);
  }
  ~ZstdSource() override { ZSTD_freeDStream(stream_); }
  std::size_t read(char* buffer, std::size_t n) override {
    ZSTD_outBuffer out{buffer, n, 0};
    while (out.pos == 0) {
      if (input_.pos == input_.size) {
        std::size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          if (frame_pending_)
            core::fail("{}: truncated zstd stream (ends in the middle of a frame)", path_);
          return 0;
        }
        input_ = {in_.data(), got, 0};
      }
      std::size_t rc = ZSTD_decompressStream(stream_, &out, &input_);
      if (ZSTD_isError(rc)) core::fail("{}: corrupt zstd data: {}", path_, ZSTD_getErrorName(rc));
      frame_pending_ = rc != 0;
    }
    return out.pos;
  }

 private:
  FileSource file_;
  std::vector<char> in_;
  ZSTD_DStream* stream_ = nullptr;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_pending_ = false;
};

}  // namespace

bool is_compressed_path(const std::string& path) {
  return ends_with(path, ".gz") || ends_with(path, ".zst") || ends_with(path, ".zstd");
}

std::string strip_compression_suffix(const std::string& path) {
  for (const char* s : {".gz", ".zst", ".zstd"})
    if (ends_with(path, s)) return path.substr(0, path.size() - std::strlen(s));
  return path;
}

std::unique_ptr<ByteSource> open_byte_source(const std::string& path) {
  if (ends_with(path, ".gz")) return std::make_unique<GzipSource>(path);
  if (ends_with(path, ".zst") || ends_with(path, ".zstd"))
    return std::make_unique<ZstdSource>(path);
  return std::make_unique<FileSource>(path);
}

std::string read_all(ByteSource& source) {
  std::string out;
  std::vector<char> buffer(kChunk);
  while (std::size_t n = source.read(buffer.data(), buffer.size())) out.append(buffer.data(), n);
  return out;
}

bool LineReader::next(std::string& line) {
  while (true) {
    std::size_t nl = buffer_.find('\n', std::max(pos_, scanned_));
    if (nl != std::string::npos) {
      line.assign(buffer_, pos_, nl - pos_);
      pos_ = scanned_ = nl + 1;
      ++line_number_;
      return true;
    }
    if (eof_) {
      if (pos_ >= buffer_.size()) return false;
      line.assign(buffer_, pos_, std::string::npos);
      pos_ = buffer_.size();
      ++line_number_;
      return true;
    }
    scanned_ = buffer_.size() - pos_;
    // A "line" this long is not a JSONL record (a binary or one-line file): an error, not an
    // allocation that grows until the process dies.
    if (scanned_ > max_line_bytes_)
      core::fail("{}: line {} is longer than {} bytes without a newline (not JSONL?)",
                 source_.path(), line_number_ + 1, max_line_bytes_);
    buffer_.erase(0, pos_);
    pos_ = 0;
    std::size_t old = buffer_.size();
    buffer_.resize(old + kChunk);
    std::size_t got = source_.read(buffer_.data() + old, kChunk);
    buffer_.resize(old + got);
    if (got == 0) eof_ = true;
  }
}

}  // namespace tandem::io
