// Which elements of the flat parameter layout each rank of an FSDP shard group holds. Every unit
// (model/sharded_parameters.h: the embedding, each block, the head) is cut into `group` contiguous
// ranges, rank g of the group holding elements [begin + ceil(n g / S), begin + ceil(n (g+1) / S))
// of a unit of n elements: rank 0 holds the largest piece, ceil(n / S), of every unit, which is
// what `tandem plan` counts per rank. A rank's shard is the concatenation of its ranges, unit by
// unit; its pieces are where those ranges meet the parameters (the alignment gaps inside a unit
// are held, as zeros, but belong to no parameter).
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/model/parameters.h"
#include "tandem/model/sharded_parameters.h"

namespace tandem::dist {

// Pool buffers for gathered blocks, and as many for their gradients (dist/fsdp.h): two while
// prefetching, the next block's gather filling one while the other is computed on; else one.
// `tandem plan` counts the same.
constexpr int fsdp_block_buffers(bool prefetching) { return prefetching ? 2 : 1; }

class FsdpShards {
 public:
  // One parameter's part inside this rank's shard.
  struct Piece {
    std::size_t param_index = 0;  // in layout.entries()
    std::int64_t start = 0;       // element offset inside that parameter
    std::int64_t length = 0;
    std::int64_t local = 0;  // element offset inside the shard
  };

  FsdpShards(const model::ParameterLayout& layout, int group, int group_rank);

  int group() const { return group_; }
  int group_rank() const { return group_rank_; }
  const std::vector<model::ParameterUnit>& units() const { return units_; }
  // Unit u's range offsets inside the unit, S + 1 of them: rank g owns [offsets[g], offsets[g+1]).
  const std::vector<std::size_t>& offsets(int unit) const {
    return offsets_[static_cast<std::size_t>(unit)];
  }
  // Where unit u's range of this rank starts inside the shard, and its length.
  std::int64_t local_begin(int unit) const { return local_[static_cast<std::size_t>(unit)]; }
  std::int64_t local_size(int unit) const;
  std::int64_t shard_size() const { return local_.back(); }  // elements this rank holds
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The largest unit (elements) among the embedding and the head, and among the blocks.
  std::int64_t largest_end_unit() const;
  std::int64_t largest_block() const;

 private:
  int group_ = 1, group_rank_ = 0;
  std::vector<model::ParameterUnit> units_;
  std::vector<std::vector<std::size_t>> offsets_;
  std::vector<std::int64_t> local_;  // units + 1 entries
  std::vector<Piece> pieces_;
};

}  // namespace tandem::dist
