// Atomic file output: write to a temporary beside the target, fsync, rename. A reader sees the old
// file or the complete new one, never a half-written one.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::core {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string final_path);  // opens "<final>.tmp.<pid>"
  ~AtomicFileWriter();                                // removes the temporary unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t n);  // throws Error (e.g. disk full) naming the file
  void write(std::string_view text) { write(text.data(), text.size()); }
  std::uint64_t bytes_written() const { return written_; }
  void commit();  // flush, fsync, rename over the final path, fsync the directory

 private:
  std::string final_path_;
  std::string temp_path_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

// Convenience: atomically replace `path` with `contents`.
void write_file_atomic(const std::string& path, std::string_view contents);
// Whole file; throws Error naming the path (missing, a directory, unreadable, an I/O error).
std::string read_file(const std::string& path);
// Streams a file through `consume` in chunks, with the same errors; `purpose` is the verb of the
// message ("read", "hash": "cannot hash X: it is a directory").
void for_each_file_chunk(const std::string& path, const char* purpose,
                         const std::function<void(const char*, std::size_t)>& consume);

}  // namespace tandem::core
