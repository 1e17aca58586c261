// Writes one OLMo-core token file (headerless little-endian ids) atomically, with a sidecar JSON
// beside it (part-00000.npy + part-00000.json) describing it: dtype, tokens, documents (EOS
// count), XXH64 checksum, plus whatever the caller adds (tokenizer sha256, resume cursor).
// OLMo-core only opens the paths it is given, so the sidecar never disturbs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/io/token_file.h"

struct XXH64_state_s;

namespace tandem::io {

// "DIR/part-00000.npy" -> "DIR/part-00000.json"
std::string sidecar_path_for(const std::string& token_file_path);

class TokenFileWriter {
 public:
  TokenFileWriter(std::string path, TokenDtype dtype, std::uint64_t eos_id);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws Error if an id does not fit the dtype.
  void append(const std::uint32_t* ids, std::size_t count);
  std::uint64_t tokens() const { return tokens_; }
  std::uint64_t documents() const { return documents_; }
  const std::string& path() const { return path_; }

  // Renames the token file into place, then writes the sidecar (so a sidecar always describes a
  // complete file). Returns the sidecar written.
  nlohmann::json commit(nlohmann::json extra);

 private:
  void flush();
  std::string path_;
  TokenDtype dtype_;
  std::uint64_t eos_id_;
  std::unique_ptr<core::AtomicFileWriter> out_;
  XXH64_state_s* hash_ = nullptr;
  std::vector<std::uint8_t> buffer_;
  std::uint64_t tokens_ = 0;
  std::uint64_t documents_ = 0;
};

// Checks that a token file matches its sidecar (size and checksum); returns the sidecar, or
// null JSON when the sidecar is missing or does not match.
nlohmann::json verified_sidecar(const std::string& token_file_path);
// XXH64 of a file as "xxh64:<16 hex>".
std::string token_file_checksum(const std::string& path);

}  // namespace tandem::io
