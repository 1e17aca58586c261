// Choosing a checkpoint: verifying one (the ranks together), the newest that verifies, what a
// path names, and pruning the superseded ones (train/checkpoint.h).
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/fault_injection.h"
#include "tandem/core/hash.h"
#include "tandem/core/path_inside.h"
#include "tandem/dist/rank_agreement.h"
#include "tandem/model/model_io.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/checkpoint_folders.h"
#include "tandem/train/checkpoint_hashing.h"
#include "tandem/train/checkpoint_manifest.h"

namespace fs = std::filesystem;

namespace tandem::train {

namespace {

// list_checkpoints as rank 0 sees it, on every rank (collective).
std::vector<std::string> list_checkpoints_of_rank_0(const std::string& checkpoints_dir,
                                                    dist::Communicator& comm) {
  nlohmann::json listed = nlohmann::json::array();
  std::string error;
  try {
    if (comm.rank() == 0) listed = list_checkpoints(checkpoints_dir);
  } catch (const core::Error& e) {
    error = e.what();
  }
  dist::fail_if_any_rank_failed(error, comm);
  if (comm.world_size() == 1) return listed.get<std::vector<std::string>>();
  return nlohmann::json::parse(dist::broadcast_string(listed.dump(), 0, comm))
      .get<std::vector<std::string>>();
}

}  // namespace

void verify_checkpoint(const std::string& dir, dist::Communicator& comm) {
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  std::string manifest_text, error;
  try {
    TANDEM_CHECK(fs::exists(manifest_path), "checkpoint {} has no manifest.json (incomplete)", dir);
    manifest_text = core::read_file(manifest_path);
  } catch (const core::Error& e) {
    error = e.what();
  }
  dist::fail_if_any_rank_failed(error, comm);
  // Ranks that read different manifests would choose different checkpoints and train on apart.
  TANDEM_CHECK(
      dist::same_on_all_ranks(
          core::xxh64(std::span(reinterpret_cast<const std::uint8_t*>(manifest_text.data()),
                                manifest_text.size())),
          comm),
      "{}: the ranks read different contents (the checkpoint folder must be on a file "
      "system every rank sees alike)",
      manifest_path);
  // From here every rank holds the same manifest, so its checks fail alike on all of them.
  const CheckpointManifest manifest = parse_checkpoint_manifest(manifest_text, manifest_path);
  const std::int64_t named = step_of_name(fs::path(dir).lexically_normal().filename().string());
  TANDEM_CHECK(named < 0 || named == manifest.step, "{}: step {} differs from the directory's {}",
               manifest_path, manifest.step, named);
  std::vector<FileToHash> files;
  try {
    for (const ManifestEntry& f : manifest.files) {
      const std::string p = core::path_inside(dir, f.name, manifest_path);
      std::error_code ec;
      const fs::file_status status = fs::symlink_status(p, ec);
      TANDEM_CHECK(fs::exists(status), "checkpoint file {} is missing", p);
      TANDEM_CHECK(fs::is_regular_file(status), "checkpoint file {} is not a regular file", p);
      const std::uint64_t size = fs::file_size(p);
      TANDEM_CHECK(size == f.bytes, "checkpoint file {} is {} bytes, manifest says {}", p, size,
                   f.bytes);
      files.push_back({f.name, f.bytes});
    }
  } catch (const core::Error& e) {
    error = e.what();
  }
  dist::fail_if_any_rank_failed(error, comm);
  // The expensive part: each file read by one rank.
  const std::vector<std::string> digests = hash_files_shared(dir, files, comm).digests;
  for (std::size_t i = 0; i < files.size(); ++i)
    TANDEM_CHECK(digests[i] == manifest.files[i].xxh64, "checkpoint file {} fails its checksum",
                 core::path_inside(dir, files[i].name, manifest_path));
  remember_verified(dir, manifest_text);
}

void verify_checkpoint(const std::string& dir) {
  dist::SingleProcessCommunicator one;
  verify_checkpoint(dir, one);
}

std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings,
                                                   dist::Communicator& comm) {
  // Rank 0's list, so that every rank tries the same folders in the same order.
  const std::vector<std::string> all = list_checkpoints_of_rank_0(checkpoints_dir, comm);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      verify_checkpoint(*it, comm);
      return *it;
    } catch (const core::Error& e) {
      if (warnings) warnings->push_back(fmt::format("skipping damaged checkpoint: {}", e.what()));
    }
  }
  return std::nullopt;
}

std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings) {
  dist::SingleProcessCommunicator one;
  return latest_valid_checkpoint(checkpoints_dir, warnings, one);
}

std::string resolve_checkpoint(const std::string& path, dist::Communicator& comm) {
  if (fs::exists(fs::path(path) / "manifest.json") || fs::exists(fs::path(path) / "state.json")) {
    verify_checkpoint(path, comm);  // also names a checkpoint whose manifest is missing
    return path;
  }
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint((fs::path(path) / "checkpoints").string(), &warnings, comm);
  // A newer checkpoint passed over is said, never silent (once, by rank 0).
  if (comm.rank() == 0)
    for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w);
  TANDEM_CHECK(latest.has_value(), "{}: no valid checkpoint found{}", path,
               warnings.empty() ? "" : " (" + warnings.back() + ")");
  return *latest;
}

std::string resolve_model_dir(const std::string& path, dist::Communicator& comm) {
  TANDEM_CHECK(fs::is_directory(path), "{}: not a directory", path);
  if (model::is_tandem_model_dir(path) || model::is_hf_model_dir(path)) return path;
  const bool checkpoint =
      fs::exists(fs::path(path) / "manifest.json") || fs::exists(fs::path(path) / "state.json");
  TANDEM_CHECK(checkpoint || fs::is_directory(fs::path(path) / "checkpoints"),
               "{}: neither a model directory (model.yaml or config.json), a checkpoint "
               "(manifest.json) nor a run directory (checkpoints/)",
               path);
  return (fs::path(resolve_checkpoint(path, comm)) / "model").string();
}

void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep,
                       std::optional<std::int64_t> newest_step, dist::Communicator& comm) {
  TANDEM_CHECK(keep >= 1, "prune_checkpoints: keep must be at least 1, got {}", keep);
  const bool leader = comm.rank() == 0;
  if (newest_step && leader) remove_stale_temporaries(checkpoints_dir);
  const std::vector<std::string> all = list_checkpoints_of_rank_0(checkpoints_dir, comm);
  std::int64_t verified = 0;  // kept checkpoints that verify (ephemeral ones are not counted)
  bool newer_verified = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::int64_t step = step_of_name(fs::path(*it).filename().string());
    // A folder past the run's newest step is not of this run's line: neither counted nor deleted.
    if (newest_step && step > *newest_step) continue;
    // Superseded by `keep` newer checkpoints that verify, or ephemeral with a newer one that does
    // (rank 0's reading of the mark, so that all ranks take the same branch).
    std::uint8_t ephemeral = 0;
    if (verified < keep) {
      ephemeral = leader && marked_ephemeral(*it);
      comm.broadcast(&ephemeral, 1, 0);
    }
    if (verified >= keep || (ephemeral && newer_verified)) {
      if (leader) {
        std::error_code ec;
        fs::remove_all(*it, ec);
        core::fault_point("checkpoint.prune");
      }
      continue;
    }
    // Rank 0 wrote (and so knows) this run's checkpoints; the others are verified by all ranks.
    std::uint8_t ok = leader && known_verified(*it);
    comm.broadcast(&ok, 1, 0);
    if (!ok) {
      try {
        verify_checkpoint(*it, comm);
        ok = 1;
      } catch (const core::Error&) {
        // Not counted, and not deleted: a damaged checkpoint may be one byte from usable.
      }
    }
    if (ok && !ephemeral) ++verified;
    newer_verified = newer_verified || ok;
  }
}

void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep,
                       std::optional<std::int64_t> newest_step) {
  dist::SingleProcessCommunicator one;
  prune_checkpoints(checkpoints_dir, keep, newest_step, one);
}

}  // namespace tandem::train
