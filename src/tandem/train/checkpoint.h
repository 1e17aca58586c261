// Trainer checkpoints: <run>/checkpoints/step-NNNNNN/ holding
//   model/            a tandem model directory (model.yaml + model.safetensors, fp32)
//   optim.safetensors Adam moments per parameter (exp_avg.<name>, exp_avg_sq.<name>)
//   state.json        step, tokens, Adam step count, skip-step state, data-loader state, ...
//   manifest.json     every file's size and XXH64, written last
// A checkpoint is written into a temporary sibling directory and renamed into place, so it is
// complete or absent. Loading verifies the manifest; a damaged checkpoint is named and skipped.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "tandem/model/olmo3_model.h"
#include "tandem/optim/adamw.h"

namespace tandem {

struct CheckpointData {
  std::int64_t step = 0;
  nlohmann::json state;  // trainer state (step, tokens, loader, skip-step, ...)
};

std::string checkpoint_dir_name(std::int64_t step);  // "step-000042"

// Writes a checkpoint atomically; throws Error (e.g. disk full) after removing the partial one.
void save_checkpoint(const std::string& checkpoints_dir, std::int64_t step, Olmo3Model& model,
                     const optim::AdamW* optimizer, const nlohmann::json& state);

// Complete checkpoints (by directory name) in ascending step order.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Throws Error naming the file when the manifest is missing, or a file is missing, truncated or
// fails its checksum.
void verify_checkpoint(const std::string& dir);

// Latest checkpoint that verifies; damaged ones are reported through `warnings` and skipped.
std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings);

// Loads weights (and, if optimizer is non-null, moments and step count) into place and returns
// the state.json contents. The model config must match the checkpoint's shapes.
nlohmann::json load_checkpoint(const std::string& dir, Olmo3Model& model, optim::AdamW* optimizer);

// Deletes all but the newest `keep` complete checkpoints.
void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep);

}  // namespace tandem
