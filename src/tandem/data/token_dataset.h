// OLMo-core's NumpyFSLDataset over memory-mapped token files: each file is cut on its own into
// sequence_length windows (remainder dropped, instances never span files; with
// max_target_sequence_length the file is first cut into max-target windows, each split into
// max_target / sequence_length instances). Global instance ids follow the mix order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/io/token_file.h"

namespace tandem::data {

struct InstanceLocation {
  std::size_t file = 0;
  std::uint64_t local_index = 0;
};

class TokenDataset {
 public:
  // Opens (maps) every file of the config. Errors name the file: missing, empty, size not a
  // multiple of the dtype, and (when config.validate_token_ids) the first id >= vocab_size.
  explicit TokenDataset(const DataConfig& config);

  std::uint64_t num_instances() const { return offsets_.back(); }
  std::int64_t sequence_length() const { return sequence_length_; }
  std::size_t num_files() const { return files_.size(); }
  const io::TokenFile& file(std::size_t i) const { return *files_[i]; }
  std::uint64_t file_size_bytes(std::size_t i) const { return files_[i]->size_bytes(); }
  std::uint64_t file_instances(std::size_t i) const { return offsets_[i + 1] - offsets_[i]; }
  const std::string& source_label(std::size_t file) const { return labels_[file]; }

  InstanceLocation locate(std::uint64_t instance) const;
  // Copies the instance's tokens (sequence_length of them) into out.
  void read_instance(std::uint64_t instance, std::span<std::int64_t> out) const;

  // OLMo-core's dataset fingerprint (version "v2.0"): sha256 over the class name, the settings
  // (vocab_size, pad/eos ids, dtype, max_target_sequence_length, bos id) and each file's
  // basename and size in bytes.
  std::string fingerprint() const { return fingerprint_; }
  static constexpr const char* kFingerprintVersion = "v2.0";

  // Scans every token; throws an Error naming the file, token offset and byte offset of the
  // first id >= vocab_size.
  void validate_token_ids() const;

 private:
  std::vector<std::unique_ptr<io::TokenFile>> files_;
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> offsets_;  // offsets_[i] = first global instance of file i
  std::int64_t sequence_length_ = 0;
  std::uint64_t vocab_size_ = 0;
  std::string fingerprint_;
};

}  // namespace tandem::data
