// The two small JSON files of a trainer checkpoint, parsed and checked before anything else is
// trusted: manifest.json (every file's size and XXH64) and state.json (the trainer state).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::train {

struct ManifestEntry {
  std::string name;  // relative to the checkpoint directory, '/'-separated, no '..'
  std::uint64_t bytes = 0;
  std::string xxh64;  // 16 lower-case hex digits
};

struct CheckpointManifest {
  int format_version = 0;
  std::int64_t step = 0;
  std::vector<ManifestEntry> files;
};

// Files every checkpoint holds (the manifest must list them, so an emptied list cannot verify),
// and the weights: whole (model.safetensors) or sharded (FSDP/HSDP: shards.json, whose shards
// it names).
inline constexpr const char* kRequiredCheckpointFiles[] = {"state.json", "model/model.yaml"};
inline constexpr const char* kWholeWeightsFile = "model/model.safetensors";
inline constexpr const char* kShardedWeightsIndex = "model/shards.json";

// Parses manifest.json text. Errors name `where` and the key: invalid or strict-JSON errors, an
// unknown format version, a missing or negative step, a file entry without an integer size or a
// 16-hex-digit checksum, a name that is absolute or holds '..', a required file not listed.
CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& where);

// Checks state.json's contents: an object whose step equals `expected_step` and whose counters
// are non-negative integers, with skip_step and loader objects. Errors name `where` and the key.
void check_trainer_state(const nlohmann::json& state, std::int64_t expected_step,
                         const std::string& where);

}  // namespace tandem::train
