// Hashes: SHA-256 (OpenSSL) for identities and fingerprints, XXH64 for fast checksums.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::core {

// Lower-case hex SHA-256 of a byte range.
std::string sha256_hex(std::span<const std::uint8_t> bytes);
std::string sha256_hex(std::string_view text);
// SHA-256 of a whole file, streamed; throws Error naming the path if it cannot be read.
std::string sha256_file(const std::string& path);

std::uint64_t xxh64(std::span<const std::uint8_t> bytes, std::uint64_t seed = 0);
// XXH64 of a whole file as 16 lower-case hex digits.
std::uint64_t xxh64_file(const std::string& path);
std::string xxh64_file_hex(const std::string& path);  // 16 lower-case hex digits
std::string to_hex64(std::uint64_t value);

}  // namespace tandem::core
