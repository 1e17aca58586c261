// Model weights written by several ranks (FSDP/HSDP checkpoints), readable at any world size:
//   model.yaml                              the model config (as a whole tandem model directory)
//   shard-RRRRR-of-WWWWW.safetensors        one writer's weights: for each parameter it holds a
//                                           contiguous run of, a 1-D fp32 tensor named like the
//                                           parameter, with the run's start and the full shape in
//                                           the file's metadata
//   shards.json                             every parameter's shape and which shard holds which
//                                           element range, checked to tile every element once
// A reader asks for any ranges (its own shard at another world size, or whole tensors) and gets
// them from whichever shards hold them: resharding happens on load. read_model_weights
// (model_io.h) assembles such a directory whole, so export, convert and eval read it as any
// tandem model directory.
#pragma once

#include <string>
#include <vector>

#include "tandem/model/sharded_parameters.h"

namespace tandem::model {

std::string weight_shard_file_name(int shard, int num_shards);  // shard-00001-of-00004...
// The directory holds sharded weights (shards.json).
bool is_sharded_model_dir(const std::string& dir);

// Writes shard `shard` of `num_shards` into `dir` (which must exist).
void write_weight_shard(const std::string& dir, int shard, int num_shards,
                        const std::vector<WeightSlice>& slices);
// Reads the headers of all `num_shards` shards, checks that they tile every parameter of
// `layout` exactly once, and writes shards.json. Errors name the shard file and parameter.
void write_weight_index(const std::string& dir, int num_shards, const ParameterLayout& layout);

// Fills every slice from `dir`: a whole tandem model (model.safetensors) or sharded weights
// (shards.json). Errors name the file and parameter: a missing shard or index, a parameter not
// stored, a shape that differs, a range not covered.
void read_weight_ranges(const std::string& dir, std::vector<WeightSlice>& slices);

}  // namespace tandem::model
