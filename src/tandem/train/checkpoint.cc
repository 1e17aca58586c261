#include "tandem/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/fault_injection.h"
#include "tandem/core/hash.h"
#include "tandem/core/path_inside.h"
#include "tandem/dist/rank_agreement.h"
#include "tandem/io/json.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_config.h"
#include "tandem/model/model_io.h"
#include "tandem/model/weight_shards.h"
#include "tandem/train/checkpoint_hashing.h"
#include "tandem/train/checkpoint_manifest.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

constexpr int kFormatVersion = 2;  // 2: sharded optimizer state (optim/), and weights (model/)
const std::regex kStepDir(R"(step-(\d{6,}))");

std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), root).string());
  std::sort(out.begin(), out.end());
  return out;
}

// Temporaries of saves that were killed (.step-N.partial) or replaced (.step-N.replaced):
// after a save of this process succeeded none of them belongs to a save in flight.
void remove_stale_temporaries(const std::string& checkpoints_dir) {
  static const std::regex kTemporary(R"(\.step-\d{6,}\.(partial|replaced))");
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (fs::is_directory(it->symlink_status(ec)) && std::regex_match(name, kTemporary))
      stale.push_back(it->path());
  }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

}  // namespace

std::string checkpoint_dir_name(std::int64_t step) { return fmt::format("step-{:06d}", step); }

namespace {

// Checkpoints this process wrote or fully verified, keyed by directory with the manifest text
// they had: pruning counts only verified checkpoints, and hashing every kept checkpoint at each
// save would read gigabytes. A changed manifest means the entry no longer applies.
std::mutex verified_mutex;
std::map<std::string, std::string> verified_manifests;

void remember_verified(const std::string& dir, const std::string& manifest_text) {
  std::lock_guard<std::mutex> lock(verified_mutex);
  verified_manifests[fs::absolute(dir).lexically_normal().string()] = manifest_text;
}

bool known_verified(const std::string& dir) {
  std::string text;
  try {
    text = core::read_file((fs::path(dir) / "manifest.json").string());
  } catch (const core::Error&) {
    return false;
  }
  std::lock_guard<std::mutex> lock(verified_mutex);
  auto it = verified_manifests.find(fs::absolute(dir).lexically_normal().string());
  return it != verified_manifests.end() && it->second == text;
}

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// The step of a checkpoint directory name, or -1 for another name (or one too large).
std::int64_t step_of_name(const std::string& name) {
  std::smatch m;
  if (!std::regex_match(name, m, kStepDir)) return -1;
  std::int64_t step = -1;
  const std::string digits = m[1];
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

}  // namespace

namespace {

// Rank 0 (after every rank wrote its files): the weight and optimizer indices and state.json.
void write_checkpoint_indices(const fs::path& tmp, std::int64_t step,
                              const model::Olmo3Model& model, const OptimizerShard* optimizer,
                              const nlohmann::json& state) {
  if (model::ShardedParameters* sharded = model.sharded())
    model::write_weight_index((tmp / "model").string(), sharded->checkpoint_shards(),
                              model.layout());
  if (optimizer) write_optimizer_index((tmp / "optim").string(), optimizer->num_shards);
  core::fault_point("checkpoint.index");
  nlohmann::json st = state;
  st["step"] = step;
  st["format_version"] = kFormatVersion;
  core::write_file_atomic((tmp / "state.json").string(), st.dump(1) + "\n");
  core::fault_point("checkpoint.state");
}

// Rank 0: the manifest of `files` with their digests, written last, and the rename that makes the
// checkpoint visible.
void publish_checkpoint(const fs::path& tmp, const fs::path& final_dir, std::int64_t step,
                        const std::vector<FileToHash>& files,
                        const std::vector<std::string>& digests) {
  nlohmann::json manifest;
  manifest["format_version"] = kFormatVersion;
  manifest["step"] = step;
  for (std::size_t i = 0; i < files.size(); ++i)
    manifest["files"][files[i].name] = {{"bytes", files[i].bytes}, {"xxh64", digests[i]}};
  const std::string manifest_text = manifest.dump(1) + "\n";
  core::write_file_atomic((tmp / "manifest.json").string(), manifest_text);
  core::fault_point("checkpoint.manifest");
  // The same step saved again (e.g. on a signal right after a periodic save): the old one is
  // moved aside first, so that at every moment one complete step-N exists or the rename is
  // about to make it exist.
  const fs::path replaced =
      final_dir.parent_path() / ("." + final_dir.filename().string() + ".replaced");
  std::error_code ec;
  fs::remove_all(replaced, ec);
  if (fs::exists(fs::symlink_status(final_dir))) fs::rename(final_dir, replaced);
  fs::rename(tmp, final_dir);
  sync_directory(final_dir.parent_path().string());
  core::fault_point("checkpoint.renamed");
  fs::remove_all(replaced, ec);
  remember_verified(final_dir.string(), manifest_text);
}

}  // namespace

void save_checkpoint(const std::string& checkpoints_dir, std::int64_t step,
                     model::Olmo3Model& model, const OptimizerShard* optimizer,
                     const nlohmann::json& state, dist::Communicator& comm) {
  const fs::path final_dir = fs::path(checkpoints_dir) / checkpoint_dir_name(step);
  // One name for all ranks (the directory is shared); a stale one is from a killed save.
  const fs::path tmp =
      fs::path(checkpoints_dir) / fmt::format(".{}.partial", checkpoint_dir_name(step));
  const bool leader = comm.rank() == 0;
  std::string error;
  std::optional<dist::RankFailure> failure;
  // Runs `body` (on the ranks that call this) unless a rank failed before; then every rank
  // learns whether any failed, and the first failure's message.
  auto phase = [&](bool here, auto&& body) {
    if (failure) return;
    if (here) {
      try {
        body();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    failure = dist::first_failure(error, comm);
  };
  phase(leader, [&] {
    fs::remove_all(tmp);
    fs::create_directories(optimizer ? tmp / "optim" : tmp);
    fs::create_directories(tmp / "model");
    core::fault_point("checkpoint.begin");
  });
  phase(true, [&] {
    if (model::ShardedParameters* sharded = model.sharded()) {
      // Each rank writes its own range of the masters (nothing is gathered).
      if (leader) model::save_tandem_model_config((tmp / "model").string(), model.config());
      const model::WeightShard mine = sharded->weights();
      if (mine.shard < mine.num_shards)
        model::write_weight_shard((tmp / "model").string(), mine.shard, mine.num_shards,
                                  mine.slices);
    } else if (leader) {
      model::save_tandem_model((tmp / "model").string(), model);
    }
    core::fault_point("checkpoint.model");
    if (optimizer && optimizer->shard < optimizer->num_shards)
      write_optimizer_shard((tmp / "optim").string(), optimizer->shard, optimizer->num_shards,
                            optimizer->slices, optimizer->adam_step);
    core::fault_point("checkpoint.shard");
  });
  nlohmann::json listed = nlohmann::json::array();
  phase(leader, [&] {
    write_checkpoint_indices(tmp, step, model, optimizer, state);
    for (const auto& rel : files_under(tmp)) listed.push_back({rel, fs::file_size(tmp / rel)});
  });
  // The manifest's digests, each file read by one rank: no rank reads the whole checkpoint.
  std::vector<FileToHash> files;
  std::vector<std::string> digests;
  phase(true, [&] {
    for (const auto& f : nlohmann::json::parse(dist::broadcast_string(listed.dump(), 0, comm)))
      files.push_back({f[0].get<std::string>(), f[1].get<std::uint64_t>()});
    digests = hash_files_shared(tmp.string(), files, comm).digests;
  });
  phase(leader, [&] { publish_checkpoint(tmp, final_dir, step, files, digests); });
  if (failure) {
    std::error_code ec;
    if (leader) fs::remove_all(tmp, ec);
    core::fail(
        "saving checkpoint {} failed{}: {} (earlier checkpoints are untouched)", final_dir.string(),
        comm.world_size() > 1 ? fmt::format(" on rank {}", failure->rank) : "", failure->message);
  }
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec)) {
    // Real directories only: a symbolic link named step-N is never read from or deleted.
    const fs::file_status status = it->symlink_status(ec);
    if (ec || !fs::is_directory(status)) continue;
    const std::int64_t step = step_of_name(it->path().filename().string());
    if (step >= 0) found.emplace_back(step, it->path().string());
  }
  TANDEM_CHECK(!ec, "cannot list checkpoints in {}: {}", checkpoints_dir, ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

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

nlohmann::json load_checkpoint(const std::string& dir, model::Olmo3Model& model,
                               std::vector<MomentSlice>* moments, std::int64_t* adam_step) {
  // state.json first: it is small, and its step must be the checkpoint's.
  const std::string state_path = (fs::path(dir) / "state.json").string();
  nlohmann::json state = io::read_json_file(state_path);
  const std::int64_t named = step_of_name(fs::path(dir).lexically_normal().filename().string());
  check_trainer_state(state,
                      named >= 0 ? named : io::json_field<std::int64_t>(state, "step", state_path),
                      state_path);
  const std::string model_dir = (fs::path(dir) / "model").string();
  if (model::ShardedParameters* sharded = model.sharded()) {
    // This rank's ranges only, from the whole model or whichever shards hold them.
    const model::ModelConfig found =
        model::load_model_config((fs::path(model_dir) / "model.yaml").string(), {});
    model::check_same_architecture(found, model.config(), "checkpoint " + dir);
    std::vector<model::WeightSlice> mine = sharded->weights().slices;
    model::read_weight_ranges(model_dir, mine);
    sharded->weights_written();
  } else {
    model::ModelWeights loaded = model::read_model_weights(model_dir);
    model::check_same_architecture(loaded.config, model.config(), "checkpoint " + dir);
    TANDEM_CHECK(static_cast<std::int64_t>(loaded.flat.size()) == model.layout().total(),
                 "checkpoint {}: parameter layout differs", dir);
    model.params_from_host(loaded.flat);
  }
  if (moments) {
    // Format 1 (before sharding) kept the moments whole in one optim.safetensors.
    const fs::path unsharded = fs::path(dir) / "optim.safetensors";
    const std::int64_t step =
        fs::exists(unsharded) && !fs::exists(fs::path(dir) / "optim")
            ? read_unsharded_optimizer_state(unsharded.string(), *moments)
            : read_optimizer_state((fs::path(dir) / "optim").string(), *moments);
    if (adam_step) *adam_step = step;
  }
  return state;
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
  std::int64_t verified = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::int64_t step = step_of_name(fs::path(*it).filename().string());
    // A folder past the run's newest step is not of this run's line: neither counted nor deleted.
    if (newest_step && step > *newest_step) continue;
    if (verified >= keep) {
      // Superseded by `keep` newer checkpoints that verify.
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
    if (ok) ++verified;
  }
}

void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep,
                       std::optional<std::int64_t> newest_step) {
  dist::SingleProcessCommunicator one;
  prune_checkpoints(checkpoints_dir, keep, newest_step, one);
}

}  // namespace tandem::train
