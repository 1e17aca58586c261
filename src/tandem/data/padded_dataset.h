// OLMo-core's NumpyPaddedFSLDataset: one instance per document, padded to sequence_length.
// Documents are found as OLMo-core's segment_documents_into_instances finds them (every EOS
// token ends one; tokens after a file's last EOS belong to no document and are dropped); an
// instance holds the first min(length, sequence_length) tokens of its document, then pad
// tokens, and its label mask is true on the document's tokens only. Instances follow the file
// order, documents within a file in order; each file carries a label (the held-out set it
// belongs to).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/io/token_file.h"

namespace tandem::data {

struct PaddedFile {
  std::string path;
  std::string label;
};

struct PaddedDatasetOptions {
  std::int64_t sequence_length = 0;
  std::int64_t eos_token_id = 0;
  std::int64_t pad_token_id = 0;
  std::int64_t vocab_size = 0;  // every token id must lie below it
  io::TokenDtype dtype = io::TokenDtype::kU32;
};

class PaddedDataset {
 public:
  // Maps every file and finds its documents. Errors name the file: missing, size not a multiple
  // of the dtype, no complete document, a token id >= vocab_size.
  PaddedDataset(const std::vector<PaddedFile>& files, const PaddedDatasetOptions& options);

  std::uint64_t num_instances() const { return instances_.size(); }
  std::int64_t sequence_length() const { return options_.sequence_length; }
  const std::string& label(std::uint64_t instance) const;
  // Real tokens of the instance (its document, truncated to sequence_length).
  std::int64_t length(std::uint64_t instance) const;
  // Fills ids (sequence_length entries, pad after the document) and, when given, the label
  // mask (1 on the document's tokens, 0 on padding).
  void read_instance(std::uint64_t instance, std::span<std::int64_t> ids,
                     std::span<std::uint8_t> label_mask = {}) const;
  std::vector<std::string> labels() const;  // distinct labels, in file order

 private:
  struct Instance {
    std::uint32_t file;
    std::uint64_t start;
    std::uint32_t length;
  };
  PaddedDatasetOptions options_;
  std::vector<std::unique_ptr<io::TokenFile>> files_;
  std::vector<std::string> file_labels_;
  std::vector<Instance> instances_;
};

}  // namespace tandem::data
