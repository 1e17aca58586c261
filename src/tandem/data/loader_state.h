// The data loader's resumable state, as JSON. Fields follow OLMo-core's NumpyFSLDataLoader
// state_dict (dataset_fingerprint[_version], batches_processed, tokens_processed, seed, epoch,
// dataset_type, sequence_length, max_target_sequence_length) plus global_batch_size and the file
// list, so that a mismatch can name the file that changed. Nothing in it depends on world size.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::data {

class TokenDataset;
struct DataConfig;

struct LoaderState {
  struct File {
    std::string name;  // basename, as in the fingerprint
    std::uint64_t size_bytes = 0;
    bool operator==(const File&) const = default;
  };
  std::string fingerprint_version;
  std::string fingerprint;
  std::uint64_t batches_processed = 0;  // in the current epoch
  std::uint64_t tokens_processed = 0;   // in the current epoch
  std::int64_t seed = 0;
  std::uint64_t epoch = 1;  // 1-based
  std::string dataset_type = "fsl";
  std::int64_t sequence_length = 0;
  std::optional<std::int64_t> max_target_sequence_length;
  std::int64_t global_batch_size = 0;
  std::vector<File> files;

  nlohmann::json to_json() const;
  // `where` names the source (a file) in errors about missing or mistyped fields.
  static LoaderState from_json(const nlohmann::json& j, const std::string& where = "loader state");
  static LoaderState read(const std::string& path);
  void write(const std::string& path) const;  // atomic
};

// Describes the current dataset and settings in a state at the start of epoch 1.
LoaderState initial_state(const DataConfig& config, const TokenDataset& dataset);

// Refuses to resume `saved` on the current data/settings (changed files, seed, sequence length,
// max_target_sequence_length) with a message naming the difference; with `allow_mismatch` (the
// deliberate case) only max_target_sequence_length and dataset_type are still refused. Returns
// the state to continue from: batches_processed = tokens_processed / global_batch_size, seed and
// sequence settings of the current config.
LoaderState check_resume(const LoaderState& saved, const LoaderState& current, bool allow_mismatch);

}  // namespace tandem::data
