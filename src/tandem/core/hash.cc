#include "tandem/core/hash.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <memory>
#include <vector>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::core {
namespace {

struct DigestContext {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  DigestContext() {
    TANDEM_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
                 "OpenSSL: cannot initialise SHA-256");
  }
  void update(const void* data, std::size_t n) { EVP_DigestUpdate(ctx.get(), data, n); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), digest, &len);
    std::string out;
    out.reserve(len * 2);
    for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", digest[i]);
    return out;
  }
};

}  // namespace

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  DigestContext d;
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string sha256_hex(std::string_view text) {
  DigestContext d;
  d.update(text.data(), text.size());
  return d.hex();
}

std::string sha256_file(const std::string& path) {
  DigestContext d;
  for_each_file_chunk(path, "hash", [&](const char* data, std::size_t n) { d.update(data, n); });
  return d.hex();
}

std::uint64_t xxh64(std::span<const std::uint8_t> bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

std::string to_hex64(std::uint64_t value) { return fmt::format("{:016x}", value); }

std::uint64_t xxh64_file(const std::string& path) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                   &XXH64_freeState);
  XXH64_reset(state.get(), 0);
  for_each_file_chunk(path, "checksum",
                      [&](const char* data, std::size_t n) { XXH64_update(state.get(), data, n); });
  return XXH64_digest(state.get());
}

std::string xxh64_file_hex(const std::string& path) { return to_hex64(xxh64_file(path)); }

}  // namespace tandem::core
