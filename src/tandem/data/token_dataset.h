// The training dataset over memory-mapped token files, OLMo-core's NumpyFSLDataset or (with
// `dataset: packed`) NumpyPackedFSLDataset.
// - FSL: each file is cut on its own into sequence_length windows (remainder dropped, instances
//   never span files; with max_target_sequence_length the file is first cut into max-target
//   windows, each split into max_target / sequence_length instances).
// - Packed: whole documents packed into instances per group of source_group_size consecutive
//   files (data/document_packing.h), padded with pad_token_id; the label mask is 0 on padding.
// - Source mixture (OLMo-core's NumpyFSLDatasetMixture): FSL over each entry's first allocated
//   tokens (data/source_mixture.h); a file may be an entry more than once.
// - label_mask_paths: a numpy bool file per token file whose bytes mask the labels of the tokens at
//   the same offsets (both kinds).
// Global instance ids follow the mix order (files, or groups of files, one after another).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/data/document_packing.h"
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
  // The bytes the dataset reads of file i: the whole file, or a mixture entry's allocation (what
  // OLMo-core's mixture dataset reports as the file's size, in the fingerprint too).
  std::uint64_t file_size_bytes(std::size_t i) const {
    return entry_tokens_[i] * io::token_dtype_size(files_[i]->dtype());
  }
  // The tokens the dataset reads of entry i, from the file's start.
  std::uint64_t entry_tokens(std::size_t i) const { return entry_tokens_[i]; }
  const std::string& source_label(std::size_t file) const { return labels_[file]; }

  bool packed() const { return !groups_.empty(); }
  // Whether instances carry a label mask: packed (padding) or label_mask_paths given.
  bool has_label_masks() const { return packed() || !masks_.empty(); }
  // The instance's file and its index there (packed: the group's first file, and the index
  // within the group).
  InstanceLocation locate(std::uint64_t instance) const;
  // Copies the instance's tokens (sequence_length of them) into out and, when given, its label
  // mask (sequence_length entries: 1 on document tokens, 0 on a packed instance's padding).
  void read_instance(std::uint64_t instance, std::span<std::int64_t> out,
                     std::span<std::uint8_t> label_mask = {}) const;
  // Packed: the lengths of the instance's documents, in order (empty for FSL).
  std::vector<std::int64_t> document_lengths(std::uint64_t instance) const;
  // Packed with use_array_if_local: false: the documents are the metadata's, which scanning the
  // row for EOS would not find again (a document without a final EOS merges with the next).
  bool documents_from_metadata() const { return !metadata_sha256_.empty(); }
  // For documents_from_metadata(): OLMo-core's doc_lens of the instance as per-token document
  // starts (what model::document_starts gives for scanned rows): the packed documents, then the
  // padding segmented as OLMo-core segments it (with a BOS id, joined to the last document).
  void document_starts(std::uint64_t instance, std::span<std::int64_t> starts) const;
  // Packed: each group's packing (documents, instances), for the audit.
  const std::vector<PackedInstances>& packed_groups() const { return groups_; }

  // OLMo-core's dataset fingerprint (version "v2.0"): sha256 over the class name, the settings
  // (vocab_size, pad/eos ids, dtype, then max_target_sequence_length and bos id, or for packed
  // long_doc_strategy, bos id, sequence_length and a source_group_size above 1) and each file's
  // basename and size in bytes.
  std::string fingerprint() const { return fingerprint_; }
  static constexpr const char* kFingerprintVersion = "v2.0";

  // Scans every token; throws an Error naming the file, token offset and byte offset of the
  // first id >= vocab_size.
  void validate_token_ids() const;

 private:
  void pack(const DataConfig& config);
  // Packed: the instance's group and its index there.
  std::pair<const PackedInstances*, std::uint64_t> packed_instance(std::uint64_t instance) const;
  void check_ids(std::span<const std::int64_t> ids, std::size_t file, std::uint64_t start) const;
  void read_mask(std::size_t file, std::uint64_t start, std::span<std::uint8_t> out) const;

  std::vector<std::shared_ptr<const io::TokenFile>> files_;  // one per entry, shared per path
  std::vector<std::unique_ptr<io::TokenFile>> masks_;        // label_mask_paths, one per file
  std::vector<std::string> labels_;
  std::vector<std::uint64_t> entry_tokens_;  // tokens read per entry: the file's, or its allocation

  // offsets_[i] = first global instance of file i (FSL) or of packing group i (packed).
  std::vector<std::uint64_t> offsets_;
  std::vector<PackedInstances> groups_;        // packed only, one per group
  std::vector<std::size_t> group_first_file_;  // packed only
  std::int64_t sequence_length_ = 0;
  std::uint64_t vocab_size_ = 0;
  std::int64_t pad_token_id_ = 0;
  std::int64_t eos_token_id_ = 0;
  std::optional<std::int64_t> bos_token_id_;
  std::vector<std::string> metadata_sha256_;  // packed from metadata: per file, of its .csv.gz
  std::string fingerprint_;
};

}  // namespace tandem::data
