// In-memory gzip and zstd compression for the reader and `data tokenize` tests (inputs that the
// readers must decompress, including concatenated members and frames).
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <string>

namespace tandem::testing {

inline std::string gzip_bytes(const std::string& data) {
  std::string out(compressBound(data.size()) + 64, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 15 + 16: gzip framing
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline std::string zstd_bytes(const std::string& data, int level = 3) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level));
  return out;
}

}  // namespace tandem::testing
