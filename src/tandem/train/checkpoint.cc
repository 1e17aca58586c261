// Saving and loading a checkpoint; choosing one is checkpoint_choice.cc's job.
#include "tandem/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/fault_injection.h"
#include "tandem/dist/flat_split.h"
#include "tandem/dist/rank_agreement.h"
#include "tandem/io/json.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_config.h"
#include "tandem/model/model_io.h"
#include "tandem/model/weight_shards.h"
#include "tandem/train/checkpoint_folders.h"
#include "tandem/train/checkpoint_hashing.h"
#include "tandem/train/checkpoint_manifest.h"

namespace fs = std::filesystem;

namespace tandem::train {

std::string checkpoint_dir_name(std::int64_t step) { return fmt::format("step-{:06d}", step); }

namespace {

constexpr int kFormatVersion = 2;  // 2: sharded optimizer state (optim/), and weights (model/)

std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), root).string());
  std::sort(out.begin(), out.end());
  return out;
}

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Replicated weights (ddp, zero1): this rank's even share of the flat buffer, the range ZeRO-1's
// moments take too (dist/flat_split.h): no rank copies or writes the whole model. `staging`
// holds the share when the backend's memory is not the host's.
model::WeightShard replicated_weight_share(const model::Olmo3Model& model, int rank, int world,
                                           std::vector<float>& staging) {
  const model::ParameterLayout& layout = model.layout();
  const std::vector<std::int64_t> offsets = dist::split_evenly(model.params().numel(), world);
  const std::int64_t begin = offsets[static_cast<std::size_t>(rank)];
  const std::int64_t end = offsets[static_cast<std::size_t>(rank) + 1];
  float* values = nullptr;
  if (model.backend().host_accessible()) {
    values = model.params().ptr<float>() + begin;
  } else {
    staging = kernels::to_host_f32(model.backend(), model.params().view(begin, {end - begin}));
    values = staging.data();
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> placed;
  for (const model::ParameterEntry& e : layout.entries()) placed.emplace_back(e.offset, e.numel);
  model::WeightShard out;
  for (const dist::RunInRange& run : dist::runs_in_range(placed, begin, end)) {
    const model::ParameterEntry& e = layout.entries()[run.item];
    out.slices.push_back({e.name, e.shape, run.start,
                          std::span<float>(values + (e.offset + run.start - begin),
                                           static_cast<std::size_t>(run.length))});
  }
  out.shard = rank;
  out.num_shards = world;
  return out;
}

// Rank 0 (after every rank wrote its files): the weight (`weight_shards` > 0: in shards) and
// optimizer indices and state.json.
void write_checkpoint_indices(const fs::path& tmp, std::int64_t step,
                              const model::Olmo3Model& model, int weight_shards,
                              const OptimizerShard* optimizer, const nlohmann::json& state) {
  if (weight_shards > 0)
    model::write_weight_index((tmp / "model").string(), weight_shards, model.layout());
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
  // The weights in shards, each rank its own range (nothing is gathered): FSDP's masters or a
  // replicated model's even share; a single process with a whole model writes one file.
  std::vector<float> staging;  // a replicated share copied from device memory
  std::optional<model::WeightShard> weights;
  phase(true, [&] {
    if (model::ShardedParameters* sharded = model.sharded())
      weights = sharded->weights();
    else if (comm.world_size() > 1)
      weights = replicated_weight_share(model, comm.rank(), comm.world_size(), staging);
    if (!weights) {
      model::save_tandem_model((tmp / "model").string(), model);
    } else {
      if (leader) model::save_tandem_model_config((tmp / "model").string(), model.config());
      if (weights->shard < weights->num_shards)
        model::write_weight_shard((tmp / "model").string(), weights->shard, weights->num_shards,
                                  weights->slices);
    }
    core::fault_point("checkpoint.model");
    if (optimizer && optimizer->shard < optimizer->num_shards)
      write_optimizer_shard((tmp / "optim").string(), optimizer->shard, optimizer->num_shards,
                            optimizer->slices, optimizer->adam_step);
    core::fault_point("checkpoint.shard");
  });
  nlohmann::json listed = nlohmann::json::array();
  phase(leader, [&] {
    write_checkpoint_indices(tmp, step, model, weights ? weights->num_shards : 0, optimizer, state);
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

}  // namespace tandem::train
