#include "tandem/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_io.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

constexpr int kFormatVersion = 2;  // 2: sharded optimizer state (optim/)
const std::regex kStepDir(R"(step-(\d{6,}))");

std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), root).string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_dir_name(std::int64_t step) { return fmt::format("step-{:06d}", step); }

namespace {

// Rank 0 (after every rank wrote its files): the optimizer index, state.json, the manifest, and
// the rename that makes the checkpoint visible.
void finish_checkpoint(const fs::path& tmp, const fs::path& final_dir, std::int64_t step,
                       const OptimizerShard* optimizer, const nlohmann::json& state) {
  if (optimizer) write_optimizer_index((tmp / "optim").string(), optimizer->num_shards);
  nlohmann::json st = state;
  st["step"] = step;
  st["format_version"] = kFormatVersion;
  core::write_file_atomic((tmp / "state.json").string(), st.dump(1) + "\n");
  nlohmann::json manifest;
  manifest["format_version"] = kFormatVersion;
  manifest["step"] = step;
  for (const auto& rel : files_under(tmp)) {
    std::string p = (tmp / rel).string();
    manifest["files"][rel] = {{"bytes", fs::file_size(p)}, {"xxh64", core::xxh64_file_hex(p)}};
  }
  core::write_file_atomic((tmp / "manifest.json").string(), manifest.dump(1) + "\n");
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // same step re-saved (e.g. on a signal)
  fs::rename(tmp, final_dir);
}

// True on every rank when any rank reports a failure.
bool any_rank_failed(bool failed, dist::Communicator& comm) {
  double count = failed ? 1.0 : 0.0;
  comm.all_reduce_sum(&count, 1);
  return count > 0;
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
  auto attempt = [&](auto&& body) {
    if (!error.empty()) return;
    try {
      body();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  if (leader)
    attempt([&] {
      fs::remove_all(tmp);
      fs::create_directories(optimizer ? tmp / "optim" : tmp);
    });
  bool failed = any_rank_failed(!error.empty(), comm);
  if (!failed) {
    attempt([&] {
      if (leader) model::save_tandem_model((tmp / "model").string(), model);
      if (optimizer && optimizer->shard < optimizer->num_shards)
        write_optimizer_shard((tmp / "optim").string(), optimizer->shard, optimizer->num_shards,
                              optimizer->slices, optimizer->adam_step);
    });
    failed = any_rank_failed(!error.empty(), comm);
    if (!failed && leader)
      attempt([&] { finish_checkpoint(tmp, final_dir, step, optimizer, state); });
    failed = any_rank_failed(!error.empty(), comm);
  }
  if (failed) {
    std::error_code ec;
    if (leader) fs::remove_all(tmp, ec);
    core::fail("saving checkpoint {} failed: {} (earlier checkpoints are untouched)",
               final_dir.string(), error.empty() ? "on another rank" : error);
  }
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(checkpoints_dir)) {
    std::smatch m;
    std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, kStepDir))
      found.emplace_back(std::stoll(m[1]), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

void verify_checkpoint(const std::string& dir) {
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  TANDEM_CHECK(fs::exists(manifest_path), "checkpoint {} has no manifest.json (incomplete)", dir);
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(core::read_file(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid JSON: {}", manifest_path, e.what());
  }
  TANDEM_CHECK(manifest.contains("files") && manifest["files"].is_object(), "{}: no file list",
               manifest_path);
  for (const auto& [rel, info] : manifest["files"].items()) {
    std::string p = (fs::path(dir) / rel).string();
    TANDEM_CHECK(fs::exists(p), "checkpoint file {} is missing", p);
    std::uint64_t bytes = info.at("bytes").get<std::uint64_t>();
    TANDEM_CHECK(fs::file_size(p) == bytes, "checkpoint file {} is {} bytes, manifest says {}", p,
                 fs::file_size(p), bytes);
    TANDEM_CHECK(core::xxh64_file_hex(p) == info.at("xxh64").get<std::string>(),
                 "checkpoint file {} fails its checksum", p);
  }
}

std::optional<std::string> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                   std::vector<std::string>* warnings) {
  auto all = list_checkpoints(checkpoints_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      verify_checkpoint(*it);
      return *it;
    } catch (const core::Error& e) {
      if (warnings) warnings->push_back(fmt::format("skipping damaged checkpoint: {}", e.what()));
    }
  }
  return std::nullopt;
}

nlohmann::json load_checkpoint(const std::string& dir, model::Olmo3Model& model,
                               std::vector<MomentSlice>* moments, std::int64_t* adam_step) {
  model::ModelWeights loaded = model::read_model_weights((fs::path(dir) / "model").string());
  const auto& a = loaded.config;
  const auto& b = model.config();
  TANDEM_CHECK(a.d_model == b.d_model && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
                   a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim &&
                   a.hidden_size == b.hidden_size && a.embedding_size == b.embedding_size,
               "checkpoint {} holds a model of another shape than the config's", dir);
  TANDEM_CHECK(static_cast<std::int64_t>(loaded.flat.size()) == model.layout().total(),
               "checkpoint {}: parameter layout differs", dir);
  model.params_from_host(loaded.flat);
  if (moments) {
    // Format 1 (before sharding) kept the moments whole in one optim.safetensors.
    const fs::path unsharded = fs::path(dir) / "optim.safetensors";
    const std::int64_t step =
        fs::exists(unsharded) && !fs::exists(fs::path(dir) / "optim")
            ? read_unsharded_optimizer_state(unsharded.string(), *moments)
            : read_optimizer_state((fs::path(dir) / "optim").string(), *moments);
    if (adam_step) *adam_step = step;
  }
  return nlohmann::json::parse(core::read_file((fs::path(dir) / "state.json").string()));
}

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) {
    verify_checkpoint(path);
    return path;
  }
  std::vector<std::string> warnings;
  auto latest = latest_valid_checkpoint((fs::path(path) / "checkpoints").string(), &warnings);
  TANDEM_CHECK(latest.has_value(), "{}: no valid checkpoint found{}", path,
               warnings.empty() ? "" : " (" + warnings.back() + ")");
  return *latest;
}

std::string resolve_model_dir(const std::string& path) {
  TANDEM_CHECK(fs::is_directory(path), "{}: not a directory", path);
  if (model::is_tandem_model_dir(path) || model::is_hf_model_dir(path)) return path;
  const bool checkpoint = fs::exists(fs::path(path) / "manifest.json");
  TANDEM_CHECK(checkpoint || fs::is_directory(fs::path(path) / "checkpoints"),
               "{}: neither a model directory (model.yaml or config.json), a checkpoint "
               "(manifest.json) nor a run directory (checkpoints/)",
               path);
  return (fs::path(resolve_checkpoint(path)) / "model").string();
}

void prune_checkpoints(const std::string& checkpoints_dir, std::int64_t keep) {
  auto all = list_checkpoints(checkpoints_dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i)
    fs::remove_all(all[i]);
}

}  // namespace tandem::train
