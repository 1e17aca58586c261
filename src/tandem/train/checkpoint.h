// Trainer checkpoints: <run>/checkpoints/step-NNNNNN/ holding
//   model/            a tandem model directory (model.yaml + model.safetensors, fp32), by rank 0;
//                     under FSDP/HSDP model.yaml by rank 0 and one weight shard per shard-group
//                     rank + shards.json (model/weight_shards.h)
//   optim/            Adam moments, one shard per writing rank + index.json (optimizer_shards.h)
//   state.json        step, tokens, skip-step state, data-loader state, ... (rank 0)
//   manifest.json     every file's size and XXH64, written last (rank 0)
// Every rank writes into one temporary sibling directory which rank 0 renames into place once
// all ranks succeeded, so a checkpoint is complete or absent. Loading verifies the manifest; a
// damaged checkpoint is named and skipped.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/train/optimizer_shards.h"

namespace tandem::train {

struct CheckpointData {
  std::int64_t step = 0;
  nlohmann::json state;  // trainer state (step, tokens, loader, skip-step, ...)
};

std::string checkpoint_dir_name(std::int64_t step);  // "step-000042"

// Writes a checkpoint atomically; every rank calls it (collective). `optimizer` may be null (no
// optimizer state), or this rank's shard; ranks whose shard index is >= num_shards write none.
// Throws Error on every rank (e.g. disk full on any of them) after removing the partial one.
void save_checkpoint(const std::string& checkpoints_dir, std::int64_t step,
                     model::Olmo3Model& model, const OptimizerShard* optimizer,
                     const nlohmann::json& state, dist::Communicator& comm);

// Directories named step-N (real directories, not symbolic links) in ascending step order;
// whether each is complete is verify_checkpoint's job.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Throws Error naming the file when the manifest is missing or invalid (checkpoint_manifest.h),
// names a file outside the directory, or a file is missing, not a regular file, of another size
// or fails its checksum. With a communicator (collective): every rank reads the manifest, which
// must be the same on all; each file is hashed by one rank (checkpoint_hashing.h), and every rank
// ends with the same outcome (the first failing rank's error).
void verify_checkpoint(const std::string& dir, dist::Communicator& comm);
void verify_checkpoint(const std::string& dir);  // this process alone

// Latest checkpoint that verifies; damaged ones are reported through `warnings` and skipped.
// With a communicator (collective): the folders rank 0 lists, verified by all ranks together, so
// every rank chooses the same one.
std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings,
                                                   dist::Communicator& comm);
std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings);

// Loads weights (a sharded model: this rank's ranges only; either kind of model/ into either kind
// of model) (and, if `moments` is non-null, the moments of those slices, from whichever
// shards hold them, and the Adam step count) into place and returns the state.json contents.
// The model config must match the checkpoint's shapes. `dir` must have passed verify_checkpoint
// (latest_valid_checkpoint does that): hashing every file is the expensive part of a load, so it
// is done once, where the checkpoint is chosen.
nlohmann::json load_checkpoint(const std::string& dir, model::Olmo3Model& model,
                               std::vector<MomentSlice>* moments, std::int64_t* adam_step);

// A checkpoint directory (verified), or a run directory's newest valid checkpoint. Throws
// core::Error naming the path when there is none. Collective: the ranks verify together and
// agree (rank 0 says which newer checkpoints were passed over).
std::string resolve_checkpoint(const std::string& path, dist::Communicator& comm);

// The model directory `path` means: a tandem or HF model directory as it is, a checkpoint's
// model/ (the checkpoint verified first), or a run directory's newest valid checkpoint's model/.
// Collective, as resolve_checkpoint.
std::string resolve_model_dir(const std::string& path, dist::Communicator& comm);

// Deletes the checkpoints that `keep` newer verified checkpoints supersede, and the ephemeral ones
// (state.json's "ephemeral": true) older than a checkpoint that verifies; ephemeral checkpoints
// are not counted in `keep`. A folder that does not verify is never counted (a stray or damaged
// step-000099 cannot push good ones out) and is left in place unless it is older than the kept
// ones; folders past `newest_step` (the step just saved) are left alone. Verification results
// are cached per manifest for the process. With a communicator (collective): rank 0's list and
// its cache (it wrote this run's checkpoints), the others verified by all ranks together,
// deletions by rank 0.
void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep,
                       std::optional<std::int64_t> newest_step, dist::Communicator& comm);
void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep,
                       std::optional<std::int64_t> newest_step = std::nullopt);

}  // namespace tandem::train
