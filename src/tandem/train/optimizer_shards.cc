#include "tandem/train/optimizer_shards.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

constexpr int kIndexVersion = 1;
constexpr const char* kIndexFile = "index.json";

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const std::string& metadata_value(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  TANDEM_CHECK(it != f.metadata().end(), "{}: no '{}' in its metadata", f.path(), key);
  return it->second;
}

std::int64_t metadata_int(const io::SafetensorsFile& f, const std::string& key) {
  const std::string& v = metadata_value(f, key);
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    core::fail("{}: metadata '{}' is '{}', not an integer", f.path(), key, v);
  }
}

std::vector<std::int64_t> metadata_shape(const io::SafetensorsFile& f, const std::string& key) {
  const std::string& v = metadata_value(f, key);
  try {
    return nlohmann::json::parse(v).get<std::vector<std::int64_t>>();
  } catch (const nlohmann::json::exception&) {
    core::fail("{}: metadata '{}' is '{}', not a shape", f.path(), key, v);
  }
}

// A slice's two moments with the tensor-name prefix each is stored under.
std::array<std::pair<const char*, std::span<float>>, 2> moments_of(MomentSlice& s) {
  return {{{"exp_avg.", s.exp_avg}, {"exp_avg_sq.", s.exp_avg_sq}}};
}

struct Piece {
  std::string file;
  std::int64_t start = 0, length = 0;
};

struct FullTensor {
  std::vector<std::int64_t> shape;
  std::vector<Piece> pieces;
};

}  // namespace

std::string optimizer_shard_file_name(int shard, int num_shards) {
  return fmt::format("shard-{:05d}-of-{:05d}.safetensors", shard, num_shards);
}

void write_optimizer_shard(const std::string& optim_dir, int shard, int num_shards,
                           const std::vector<MomentSlice>& slices, std::int64_t adam_step) {
  std::vector<io::TensorToWrite> tensors;
  std::map<std::string, std::string> metadata = {{"adam_step", std::to_string(adam_step)},
                                                 {"shard", std::to_string(shard)},
                                                 {"num_shards", std::to_string(num_shards)}};
  for (const MomentSlice& s : slices) {
    TANDEM_CHECK(s.exp_avg.size() == s.exp_avg_sq.size(),
                 "optimizer shard: '{}' has moments of different lengths", s.name);
    const auto n = static_cast<std::int64_t>(s.exp_avg.size());
    tensors.push_back({"exp_avg." + s.name, io::DType::kF32, {n}, s.exp_avg.data()});
    tensors.push_back({"exp_avg_sq." + s.name, io::DType::kF32, {n}, s.exp_avg_sq.data()});
    metadata["start." + s.name] = std::to_string(s.start);
    metadata["shape." + s.name] = nlohmann::json(s.shape).dump();
  }
  io::write_safetensors(
      (fs::path(optim_dir) / optimizer_shard_file_name(shard, num_shards)).string(), tensors,
      metadata);
}

void write_optimizer_index(const std::string& optim_dir, int num_shards) {
  std::map<std::string, FullTensor> tensors;
  std::int64_t adam_step = -1;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = optimizer_shard_file_name(s, num_shards);
    io::SafetensorsFile f((fs::path(optim_dir) / file).string());
    const std::int64_t step = metadata_int(f, "adam_step");
    TANDEM_CHECK(adam_step < 0 || step == adam_step,
                 "{}: Adam step {} differs from the other shards' {}", f.path(), step, adam_step);
    adam_step = step;
    for (const std::string& tensor : f.names()) {
      if (tensor.rfind("exp_avg.", 0) != 0) continue;
      const std::string name = tensor.substr(std::strlen("exp_avg."));
      const std::int64_t length = f.info(tensor).numel();
      TANDEM_CHECK(f.has("exp_avg_sq." + name) && f.info("exp_avg_sq." + name).numel() == length,
                   "{}: exp_avg_sq.{} is missing or of another length", f.path(), name);
      const auto shape = metadata_shape(f, "shape." + name);
      FullTensor& t = tensors[name];
      TANDEM_CHECK(t.pieces.empty() || t.shape == shape,
                   "{}: '{}' has another shape than in the other shards", f.path(), name);
      t.shape = shape;
      t.pieces.push_back({file, metadata_int(f, "start." + name), length});
    }
  }
  nlohmann::json index = {{"format_version", kIndexVersion},
                          {"num_shards", num_shards},
                          {"adam_step", adam_step},
                          {"tensors", nlohmann::json::object()}};
  for (auto& [name, t] : tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const Piece& a, const Piece& b) { return a.start < b.start; });
    std::int64_t covered = 0;
    nlohmann::json pieces = nlohmann::json::array();
    for (const Piece& p : t.pieces) {
      TANDEM_CHECK(p.start == covered, "optimizer shards in {}: '{}' has {} at element {}",
                   optim_dir, name, p.start < covered ? "an overlap" : "a gap", covered);
      covered += p.length;
      pieces.push_back({{"file", p.file}, {"start", p.start}, {"length", p.length}});
    }
    TANDEM_CHECK(covered == numel_of(t.shape),
                 "optimizer shards in {}: '{}' covers {} of its {} elements", optim_dir, name,
                 covered, numel_of(t.shape));
    index["tensors"][name] = {{"shape", t.shape}, {"pieces", pieces}};
  }
  core::write_file_atomic((fs::path(optim_dir) / kIndexFile).string(), index.dump(1) + "\n");
}

std::int64_t read_optimizer_state(const std::string& optim_dir, std::vector<MomentSlice>& slices) {
  const std::string index_path = (fs::path(optim_dir) / kIndexFile).string();
  TANDEM_CHECK(fs::exists(index_path), "checkpoint has no optimizer state ({} is missing)",
               index_path);
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> open;
  auto file = [&](const std::string& name) -> const io::SafetensorsFile& {
    auto& f = open[name];
    if (!f) f = std::make_unique<io::SafetensorsFile>((fs::path(optim_dir) / name).string());
    return *f;
  };
  try {
    const nlohmann::json index = nlohmann::json::parse(core::read_file(index_path));
    TANDEM_CHECK(index.at("format_version").get<int>() == kIndexVersion,
                 "{}: format version {} is not supported (expected {})", index_path,
                 index.at("format_version").dump(), kIndexVersion);
    const nlohmann::json& tensors = index.at("tensors");
    for (MomentSlice& s : slices) {
      TANDEM_CHECK(tensors.contains(s.name), "{}: no optimizer state for parameter '{}'",
                   index_path, s.name);
      const nlohmann::json& t = tensors.at(s.name);
      const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
      TANDEM_CHECK(shape == s.shape, "{}: '{}' has shape {} in the checkpoint, {} in the model",
                   index_path, s.name, nlohmann::json(shape).dump(),
                   nlohmann::json(s.shape).dump());
      const std::int64_t begin = s.start,
                         end = s.start + static_cast<std::int64_t>(s.exp_avg.size());
      std::int64_t filled = 0;
      for (const auto& p : t.at("pieces")) {
        const auto p_start = p.at("start").get<std::int64_t>();
        const auto p_end = p_start + p.at("length").get<std::int64_t>();
        const std::int64_t lo = std::max(begin, p_start), hi = std::min(end, p_end);
        if (lo >= hi) continue;
        const io::SafetensorsFile& f = file(p.at("file").get<std::string>());
        for (auto& [prefix, dst] : moments_of(s)) {
          const std::string tensor = prefix + s.name;
          TANDEM_CHECK(
              f.info(tensor).dtype == io::DType::kF32 && f.info(tensor).numel() == p_end - p_start,
              "{}: '{}' is not {} fp32 values as the index says", f.path(), tensor,
              p_end - p_start);
          std::memcpy(dst.data() + (lo - begin),
                      f.raw(tensor).data() + (lo - p_start) * sizeof(float),
                      static_cast<std::size_t>(hi - lo) * sizeof(float));
        }
        filled += hi - lo;
      }
      TANDEM_CHECK(filled == end - begin, "{}: elements [{}, {}) of '{}' are not all stored",
                   index_path, begin, end, s.name);
    }
    return index.at("adam_step").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid index: {}", index_path, e.what());
  }
}

std::int64_t read_unsharded_optimizer_state(const std::string& path,
                                            std::vector<MomentSlice>& slices) {
  io::SafetensorsFile f(path);
  for (MomentSlice& s : slices) {
    for (auto& [prefix, dst] : moments_of(s)) {
      const std::string tensor = prefix + s.name;
      TANDEM_CHECK(f.has(tensor), "{}: no '{}'", path, tensor);
      const io::TensorInfo& info = f.info(tensor);
      TANDEM_CHECK(info.dtype == io::DType::kF32 && info.shape == s.shape,
                   "{}: '{}' is not fp32 of shape {}", path, tensor,
                   nlohmann::json(s.shape).dump());
      std::memcpy(dst.data(), f.raw(tensor).data() + s.start * sizeof(float),
                  dst.size() * sizeof(float));
    }
  }
  return metadata_int(f, "adam_step");
}

}  // namespace tandem::train
