#include "tandem/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/fault_injection.h"

namespace tandem::core {

AtomicFileWriter::AtomicFileWriter(std::string final_path)
    : final_path_(std::move(final_path)),
      temp_path_(final_path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create {}: {}", temp_path_, std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, std::size_t n) {
  fault_point("atomic_file.write");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", final_path_, std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    written_ += static_cast<std::uint64_t>(w);
  }
}

void AtomicFileWriter::commit() {
  TANDEM_CHECK(!committed_, "{} committed twice", final_path_);
  if (::fsync(fd_) != 0) fail("cannot fsync {}: {}", final_path_, std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("cannot close {}: {}", final_path_, std::strerror(errno));
  }
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
    fail("cannot rename {} to {}: {}", temp_path_, final_path_, std::strerror(errno));
  committed_ = true;
  std::filesystem::path dir = std::filesystem::path(final_path_).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents);
  w.commit();
}

void for_each_file_chunk(const std::string& path, const char* purpose,
                         const std::function<void(const char*, std::size_t)>& consume) {
  // POSIX rather than iostreams: a directory or an I/O error becomes a message naming the path
  // (iostreams report "basic_filebuf::underflow" or nothing at all).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {} to {}: {}", path, purpose, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("cannot {} {}: it is a directory, expected a file", purpose, path);
  }
  std::vector<char> buffer(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail("cannot {} {}: {}", purpose, path, std::strerror(err));
    }
    if (n == 0) break;
    consume(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
}

std::string read_file(const std::string& path) {
  std::string out;
  for_each_file_chunk(path, "read", [&](const char* data, std::size_t n) { out.append(data, n); });
  return out;
}

}  // namespace tandem::core
