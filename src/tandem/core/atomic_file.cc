#include "tandem/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tandem/core/error.h"

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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  TANDEM_CHECK(!in.bad(), "error while reading {}", path);
  return ss.str();
}

}  // namespace tandem::core
