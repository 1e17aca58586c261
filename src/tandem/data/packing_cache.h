// OLMo-core's packing cache (NumpyPackedFSLDataset.prepare): per source group, three headerless
// little-endian uint64 arrays in <work_dir>/dataset-common/, named
// <name>-<sequence_length>-<sha256>.npy with the sha256 over each token file's path (as given)
// and size in bytes, then long_doc_strategy, "uint64" and the extra ids below:
//   document-indices       (start, end) of every document, token offsets within the group's
//                          files laid end to end, in the packer's order;
//   instance-offsets       (start, end) of every instance in documents-by-instance;
//   documents-by-instance  document numbers, instance after instance.
// tandem writes its packing there when the config has a work_dir, and reads a group's cache
// instead of packing it when one exists: its own from an earlier run, or OLMo-core's for the same
// paths, whose instances then are OLMo-core's, numpy's tie order included. A cache that
// contradicts the token files (a document outside its group, overlong instances, documents used
// twice or never) is refused, naming the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/document_packing.h"

namespace tandem::data {

struct PackingGroup {
  std::vector<std::string> paths;         // the token files, as the config resolved them
  std::vector<std::uint64_t> size_bytes;  // their sizes
  std::vector<std::uint64_t> num_tokens;  // their token counts
  std::uint32_t first_file = 0;           // PackedDocument::file of paths[0]
  std::int64_t sequence_length = 0;
  LongDocStrategy strategy = LongDocStrategy::kTruncate;
  // Hashed after long_doc_strategy and "uint64": "use_array_if_local=<True|False>" when set, then
  // "metadata=<path>,sha256=<hex>" per file whose boundaries came from its metadata.
  std::vector<std::string> extra_ids;
};

// The three cache files' paths, in the order named above.
std::vector<std::string> packing_cache_paths(const std::string& work_dir, const PackingGroup& g);

// The group's packing from its cache, or nothing when no complete cache exists.
std::optional<PackedInstances> read_packing_cache(const std::string& work_dir,
                                                  const PackingGroup& g);

// Writes the three files (each atomically; creates dataset-common/).
void write_packing_cache(const std::string& work_dir, const PackingGroup& g,
                         const PackedInstances& packed);

}  // namespace tandem::data
