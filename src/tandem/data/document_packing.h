// OLMo-core's NumpyPackedFSLDataset, the packing half (data/utils.py): documents found in the
// token files, capped at the sequence length, and packed whole into instances by optimized
// best-fit decreasing (OBFD, "Fewer Truncations Improve Language Modeling").
//
// - Documents: every EOS ends one (inclusive); with a BOS id, only an EOS directly followed by
//   BOS does, and an EOS as the file's last token. Tokens after a file's last boundary belong to
//   no document and are dropped.
// - Longer than the sequence length: `truncate` keeps the head, `fragment` cuts it into pieces of
//   sequence_length (the last one shorter).
// - Packing: documents sorted by decreasing length, each placed into the open instance with the
//   least room that still fits it (the first such instance opened among equals), else a new one.
//   Equal lengths keep their file order: a stable sort. OLMo-core sorts with numpy's default
//   (unstable) argsort, whose order of equal lengths depends on the CPU's vector extensions; with
//   kind="stable" its instances are these, otherwise they hold the same document lengths in the
//   same places, with equal-length documents exchanged (docs/data-pipeline.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/io/token_file.h"

namespace tandem::data {

enum class LongDocStrategy { kTruncate, kFragment };

LongDocStrategy long_doc_strategy_from_name(const std::string& name);  // "truncate", "fragment"
std::string long_doc_strategy_name(LongDocStrategy s);

// A document's tokens [start, start + length) in file `file` (an index the caller chooses).
struct PackedDocument {
  std::uint32_t file = 0;
  std::uint64_t start = 0;
  std::uint32_t length = 0;
};

// Appends the documents of one token file, capped at max_length by `strategy`.
void find_documents(const io::TokenFile& tokens, std::uint32_t file, std::int64_t eos_token_id,
                    std::optional<std::int64_t> bos_token_id, std::int64_t max_length,
                    LongDocStrategy strategy, std::vector<PackedDocument>& out);

// OLMo-core's metadata file of a token file: <dir>/<basename with ".npy" -> ".csv.gz">.
std::string metadata_path_for(const std::string& token_file);

// Appends the documents listed in a token file's metadata (one "start,end[,...]" line per
// document, token offsets), capped at max_length by `strategy`. Errors name the metadata file and
// line: a malformed line, a document outside the file's num_tokens tokens, an empty one.
void find_documents_in_metadata(const std::string& metadata_path, std::uint64_t num_tokens,
                                std::uint32_t file, std::int64_t max_length,
                                LongDocStrategy strategy, std::vector<PackedDocument>& out);

// Instances of one packing group: instance i holds documents
// documents[members[offsets[i]]] .. documents[members[offsets[i + 1] - 1]], in that order.
struct PackedInstances {
  std::vector<PackedDocument> documents;  // in the packer's (length-sorted) order
  std::vector<std::uint64_t> offsets;     // instances + 1 entries
  std::vector<std::uint32_t> members;     // indices into documents

  std::uint64_t num_instances() const { return offsets.empty() ? 0 : offsets.size() - 1; }
};

// OBFD over documents of at most max_length tokens each.
PackedInstances pack_documents(std::vector<PackedDocument> documents, std::int64_t max_length);

}  // namespace tandem::data
