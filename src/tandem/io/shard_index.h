// Tensors stored in pieces across shard files, as the sharded checkpoint folders list them
// (optim/index.json, model/shards.json): elements [start, start + length) of a flattened tensor
// live in `file`. One reader checks every index the same way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/io/safetensors.h"

namespace tandem::io {

struct ShardPiece {
  std::string file;
  std::int64_t start = 0, length = 0;
};

struct ShardedTensor {
  std::vector<std::int64_t> shape;
  std::vector<ShardPiece> pieces;
};

// An index's "tensors" object: for every tensor a shape of non-negative dimensions (at most 2^50
// elements) and pieces {file, start, length} that tile its elements exactly (sorted, no gap, no
// overlap) and name plain files inside `folder`. Errors name `where` and the tensor.
std::map<std::string, ShardedTensor> parse_sharded_tensors(const nlohmann::json& tensors,
                                                           const std::string& where,
                                                           const std::string& folder);

// The inverse, for writing an index: {"shape": [...], "pieces": [{file, start, length}, ...]}.
nlohmann::json sharded_tensor_json(const ShardedTensor& tensor);

// For a writer assembling an index from its shards: sorts the pieces by start and checks that
// they tile [0, numel) exactly; errors start with `what` (e.g. "optimizer shards in DIR: 'name'")
// and say where the gap or overlap is.
void sort_and_check_tiling(std::vector<ShardPiece>& pieces, std::int64_t numel,
                           const std::string& what);

// Calls copy(piece, lo, hi) for every piece overlapping elements [begin, end), with [lo, hi) the
// overlap; returns how many elements of [begin, end) the pieces covered.
template <typename Copy>
std::int64_t for_each_piece_in(const std::vector<ShardPiece>& pieces, std::int64_t begin,
                               std::int64_t end, Copy&& copy) {
  std::int64_t covered = 0;
  for (const ShardPiece& p : pieces) {
    const std::int64_t lo = std::max(begin, p.start), hi = std::min(end, p.start + p.length);
    if (lo >= hi) continue;
    copy(p, lo, hi);
    covered += hi - lo;
  }
  return covered;
}

// The shard files an index names, opened once each on first use. A name must stay inside `dir`
// (it comes from the index file `index_path`), and a missing file is an error naming both.
class ShardFiles {
 public:
  ShardFiles(std::string dir, std::string index_path)
      : dir_(std::move(dir)), index_path_(std::move(index_path)) {}
  const SafetensorsFile& get(const std::string& name);

 private:
  std::string dir_, index_path_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// An integer written by the shard's writer into its safetensors metadata (e.g. "start.<name>").
std::int64_t metadata_int(const SafetensorsFile& f, const std::string& key);

}  // namespace tandem::io
