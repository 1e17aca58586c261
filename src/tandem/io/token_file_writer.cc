#include "tandem/io/token_file_writer.h"

#include <filesystem>

#include <xxhash.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/mapped_file.h"
#include "tandem/io/token_sidecar.h"

namespace tandem::io {

namespace {
constexpr std::size_t kFlushBytes = 1 << 22;
}

std::string sidecar_path_for(const std::string& token_file_path) {
  return std::filesystem::path(token_file_path).replace_extension(".json").string();
}

TokenFileWriter::TokenFileWriter(std::string path, TokenDtype dtype, std::uint64_t eos_id)
    : path_(std::move(path)),
      dtype_(dtype),
      eos_id_(eos_id),
      out_(std::make_unique<core::AtomicFileWriter>(path_)),
      hash_(XXH64_createState()) {
  XXH64_reset(hash_, 0);
  buffer_.reserve(kFlushBytes + 64);
}

TokenFileWriter::~TokenFileWriter() { XXH64_freeState(hash_); }

void TokenFileWriter::append(const std::uint32_t* ids, std::size_t count) {
  const std::size_t width = token_dtype_size(dtype_);
  const std::uint64_t limit = width >= 4 ? 0xFFFFFFFFull : (1ull << (8 * width)) - 1;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t v = ids[i];
    TANDEM_CHECK(v <= limit, "{}: token id {} does not fit {}", path_, v, token_dtype_name(dtype_));
    if (v == eos_id_) ++documents_;
    for (std::size_t k = 0; k < width; ++k)
      buffer_.push_back(static_cast<std::uint8_t>(v >> (8 * k)));
    if (buffer_.size() >= kFlushBytes) flush();
  }
  tokens_ += count;
}

void TokenFileWriter::flush() {
  if (buffer_.empty()) return;
  XXH64_update(hash_, buffer_.data(), buffer_.size());
  out_->write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

nlohmann::json TokenFileWriter::commit(nlohmann::json extra) {
  flush();
  out_->commit();
  nlohmann::json sidecar = {
      {"format", "tandem token file sidecar v1"},
      {"file", std::filesystem::path(path_).filename().string()},
      {"dtype", token_dtype_name(dtype_)},
      {"tokens", tokens_},
      {"documents", documents_},
      {"eos_id", eos_id_},
      {"bytes", tokens_ * token_dtype_size(dtype_)},
      {"checksum", "xxh64:" + core::to_hex64(XXH64_digest(hash_))},
  };
  for (auto& [k, v] : extra.items()) sidecar[k] = v;
  core::write_file_atomic(sidecar_path_for(path_), sidecar.dump(1) + "\n");
  return sidecar;
}

std::string token_file_checksum(const std::string& path) {
  core::MappedFile file(path);
  return "xxh64:" + core::to_hex64(core::xxh64(file.bytes()));
}

nlohmann::json verified_sidecar(const std::string& token_file_path) {
  std::string sidecar_path = sidecar_path_for(token_file_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(sidecar_path, ec) ||
      !std::filesystem::is_regular_file(token_file_path, ec))
    return nullptr;
  try {
    TokenSidecar sidecar = parse_token_sidecar(core::read_file(sidecar_path), sidecar_path);
    auto size = std::filesystem::file_size(token_file_path);
    if (size != sidecar.bytes) return nullptr;
    if (size > 0 && token_file_checksum(token_file_path) != sidecar.checksum) return nullptr;
    return sidecar.json;
  } catch (const core::Error&) {
    return nullptr;  // damaged or not ours: the caller redoes the part
  }
}

}  // namespace tandem::io
