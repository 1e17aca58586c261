// Sharded Adam state in a checkpoint's optim/ folder, readable at any world size:
//   optim/shard-RRRRR-of-WWWWW.safetensors  one writer's moments: for each parameter it holds a
//                                           contiguous run of, 1-D tensors exp_avg.<name> and
//                                           exp_avg_sq.<name>, with the run's start and the full
//                                           shape in the file's metadata
//   optim/index.json                        the full tensors: shape and which shard holds which
//                                           element range, checked to cover every element once
// A ZeRO-1 run at W ranks writes W shards (each rank its own range); a replicated optimiser
// writes one. A reader asks for any ranges (its own ZeRO-1 range at W', or whole tensors) and
// gets them from whichever shards hold them: resharding happens on load.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/io/shard_index.h"
#include "tandem/optim/optimizer.h"

namespace tandem::train {

// One contiguous run of one parameter's Adam moments, and one rank's set of them (optim/).
using optim::MomentSlice;
using optim::OptimizerShard;

std::string optimizer_shard_file_name(int shard, int num_shards);  // shard-00001-of-00004...

// Writes shard `shard` of `num_shards` into `optim_dir` (which must exist).
void write_optimizer_shard(const std::string& optim_dir, int shard, int num_shards,
                           const std::vector<MomentSlice>& slices, std::int64_t adam_step);

// Reads the headers of all `num_shards` shards, checks that they tile every parameter exactly
// once and agree on shapes and the Adam step count, and writes optim/index.json. Throws Error
// naming the shard and parameter on any gap, overlap or disagreement.
void write_optimizer_index(const std::string& optim_dir, int num_shards);

// optim/index.json, parsed and checked: format version 1, a positive shard count, a
// non-negative Adam step, and for every tensor a shape of non-negative dimensions and pieces
// {file, start, length} that tile its elements exactly (sorted, no gap, no overlap) and name
// plain files inside optim/. Errors name `where` and the tensor.
struct OptimizerIndex {
  using Piece = io::ShardPiece;
  using Tensor = io::ShardedTensor;
  int num_shards = 0;
  std::int64_t adam_step = 0;
  std::map<std::string, Tensor> tensors;
};
OptimizerIndex parse_optimizer_index(std::string_view text, const std::string& where);

// Fills every slice from the shards that hold its range (any writer world size); returns the
// Adam step count. Throws Error naming the file on a missing parameter, a shape mismatch or a
// range not covered.
std::int64_t read_optimizer_state(const std::string& optim_dir, std::vector<MomentSlice>& slices);

// The same from a format-1 checkpoint's single optim.safetensors (whole tensors exp_avg.<name>
// and exp_avg_sq.<name>, the Adam step count in its metadata as adam_step).
std::int64_t read_unsharded_optimizer_state(const std::string& path,
                                            std::vector<MomentSlice>& slices);

}  // namespace tandem::train
