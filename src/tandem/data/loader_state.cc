#include "tandem/data/loader_state.h"

#include <filesystem>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/data/data_config.h"
#include "tandem/data/token_dataset.h"
#include "tandem/io/json.h"

namespace tandem::data {
namespace {

// Strict types: a negative count or a fractional seed is an error, not a wrapped value.
template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  return io::json_field<T>(j, key, where);
}

std::string describe_file_changes(const std::vector<LoaderState::File>& saved,
                                  const std::vector<LoaderState::File>& now) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  std::size_t n = std::max(saved.size(), now.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= saved.size()) {
      add(fmt::format("file #{} {} was added", i, now[i].name));
    } else if (i >= now.size()) {
      add(fmt::format("file #{} {} is gone", i, saved[i].name));
    } else if (saved[i].name != now[i].name) {
      add(fmt::format("file #{} was {} and is now {}", i, saved[i].name, now[i].name));
    } else if (saved[i].size_bytes != now[i].size_bytes) {
      add(fmt::format("file {} changed size from {} to {} bytes", now[i].name, saved[i].size_bytes,
                      now[i].size_bytes));
    }
    if (out.size() > 400) break;
  }
  return out.empty() ? "dataset settings differ (vocab_size, token ids or dtype)" : out;
}

}  // namespace

nlohmann::json LoaderState::to_json() const {
  nlohmann::json j;
  j["dataset_fingerprint_version"] = fingerprint_version;
  j["dataset_fingerprint"] = fingerprint;
  j["batches_processed"] = batches_processed;
  j["tokens_processed"] = tokens_processed;
  j["seed"] = seed;
  j["epoch"] = epoch;
  j["dataset_type"] = dataset_type;
  j["sequence_length"] = sequence_length;
  j["max_target_sequence_length"] =
      max_target_sequence_length ? nlohmann::json(*max_target_sequence_length) : nlohmann::json();
  j["global_batch_size"] = global_batch_size;
  nlohmann::json files_json = nlohmann::json::array();
  for (const auto& f : files) files_json.push_back({{"name", f.name}, {"size", f.size_bytes}});
  j["files"] = files_json;
  return j;
}

LoaderState LoaderState::from_json(const nlohmann::json& j, const std::string& where) {
  TANDEM_CHECK(j.is_object(), "{}: expected a JSON object", where);
  LoaderState s;
  s.fingerprint_version = field<std::string>(j, "dataset_fingerprint_version", where);
  s.fingerprint = field<std::string>(j, "dataset_fingerprint", where);
  s.batches_processed = field<std::uint64_t>(j, "batches_processed", where);
  s.tokens_processed = field<std::uint64_t>(j, "tokens_processed", where);
  s.seed = field<std::int64_t>(j, "seed", where);
  s.epoch = field<std::uint64_t>(j, "epoch", where);
  TANDEM_CHECK(s.epoch >= 1, "{}: epoch must be >= 1 (1-based), got {}", where, s.epoch);
  s.dataset_type = field<std::string>(j, "dataset_type", where);
  s.sequence_length = field<std::int64_t>(j, "sequence_length", where);
  if (j.contains("max_target_sequence_length") && !j["max_target_sequence_length"].is_null())
    s.max_target_sequence_length = field<std::int64_t>(j, "max_target_sequence_length", where);
  // Optional: an OLMo-core state_dict has neither of these.
  if (j.contains("global_batch_size"))
    s.global_batch_size = field<std::int64_t>(j, "global_batch_size", where);
  if (j.contains("files")) {
    const auto files = field<nlohmann::json>(j, "files", where);
    TANDEM_CHECK(files.is_array(), "{}: field 'files' must be a list", where);
    for (const auto& f : files) {
      File file;
      file.name = field<std::string>(f, "name", where + " files[]");
      file.size_bytes = field<std::uint64_t>(f, "size", where + " files[]");
      s.files.push_back(file);
    }
  }
  return s;
}

LoaderState LoaderState::read(const std::string& path) {
  return from_json(io::read_json_file(path), path);
}

void LoaderState::write(const std::string& path) const {
  core::write_file_atomic(path, to_json().dump(2) + "\n");
}

LoaderState initial_state(const DataConfig& config, const TokenDataset& dataset) {
  LoaderState s;
  s.fingerprint_version = TokenDataset::kFingerprintVersion;
  s.fingerprint = dataset.fingerprint();
  s.seed = config.seed;
  s.epoch = 1;
  s.sequence_length = config.sequence_length;
  s.max_target_sequence_length = config.max_target_sequence_length;
  s.global_batch_size = config.global_batch_size;
  for (std::size_t i = 0; i < dataset.num_files(); ++i)
    s.files.push_back({std::filesystem::path(dataset.file(i).path()).filename().string(),
                       dataset.file_size_bytes(i)});
  return s;
}

LoaderState check_resume(const LoaderState& saved, const LoaderState& current,
                         bool allow_mismatch) {
  const char* hint =
      "set data.ignore_fingerprint_mismatch=true to resume anyway (the data order "
      "will then differ from the original run)";
  TANDEM_CHECK(
      saved.dataset_type == "fsl",
      "loader state is for a '{}' dataset; only fixed sequence length ('fsl') is supported",
      saved.dataset_type);
  TANDEM_CHECK(
      saved.max_target_sequence_length == current.max_target_sequence_length,
      "loader state has max_target_sequence_length {} but the config has {}; resuming "
      "with a different value is not supported",
      saved.max_target_sequence_length ? std::to_string(*saved.max_target_sequence_length) : "none",
      current.max_target_sequence_length ? std::to_string(*current.max_target_sequence_length)
                                         : "none");
  if (!allow_mismatch) {
    if (saved.fingerprint_version == current.fingerprint_version &&
        saved.fingerprint != current.fingerprint) {
      core::fail("the data changed since the loader state was saved: {}; {}",
                 describe_file_changes(saved.files, current.files), hint);
    }
    TANDEM_CHECK(saved.seed == current.seed,
                 "loader state was saved with seed {} but the config has seed {}; {}", saved.seed,
                 current.seed, hint);
    TANDEM_CHECK(saved.sequence_length == current.sequence_length,
                 "loader state was saved with sequence_length {} but the config has {}; {}",
                 saved.sequence_length, current.sequence_length, hint);
  }
  LoaderState out = current;
  out.epoch = saved.epoch;
  out.tokens_processed = saved.tokens_processed;
  out.batches_processed =
      saved.tokens_processed / static_cast<std::uint64_t>(current.global_batch_size);
  return out;
}

}  // namespace tandem::data
