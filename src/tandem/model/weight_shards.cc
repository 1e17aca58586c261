#include "tandem/model/weight_shards.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/shard_index.h"

namespace fs = std::filesystem;

namespace tandem::model {
namespace {

constexpr int kIndexVersion = 1;
constexpr const char* kIndexFile = "shards.json";
constexpr const char* kWholeWeights = "model.safetensors";

// shards.json, parsed and checked (io/shard_index.h); the caller checks it against the layout.
std::map<std::string, io::ShardedTensor> read_index(const std::string& dir) {
  const std::string where = (fs::path(dir) / kIndexFile).string();
  TANDEM_CHECK(fs::exists(where), "{} is missing (sharded model weights need their index)", where);
  const nlohmann::json index = io::parse_json(core::read_file(where), where);
  TANDEM_CHECK(index.is_object(), "{}: expected a JSON object", where);
  const int version = io::json_field<int>(index, "format_version", where);
  TANDEM_CHECK(version == kIndexVersion, "{}: format version {} is not supported (expected {})",
               where, version, kIndexVersion);
  return io::parse_sharded_tensors(io::json_field<nlohmann::json>(index, "tensors", where), where,
                                   "model/");
}

}  // namespace

std::string weight_shard_file_name(int shard, int num_shards) {
  return fmt::format("shard-{:05d}-of-{:05d}.safetensors", shard, num_shards);
}

bool is_sharded_model_dir(const std::string& dir) { return fs::exists(fs::path(dir) / kIndexFile); }

void write_weight_shard(const std::string& dir, int shard, int num_shards,
                        const std::vector<WeightSlice>& slices) {
  std::vector<io::TensorToWrite> tensors;
  std::map<std::string, std::string> metadata = {{"shard", std::to_string(shard)},
                                                 {"num_shards", std::to_string(num_shards)},
                                                 {"format", "pt"}};
  for (const WeightSlice& s : slices) {
    tensors.push_back(
        {s.name, io::DType::kF32, {static_cast<std::int64_t>(s.values.size())}, s.values.data()});
    metadata["start." + s.name] = std::to_string(s.start);
  }
  io::write_safetensors((fs::path(dir) / weight_shard_file_name(shard, num_shards)).string(),
                        tensors, metadata);
}

void write_weight_index(const std::string& dir, int num_shards, const ParameterLayout& layout) {
  std::map<std::string, std::vector<io::ShardPiece>> found;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = weight_shard_file_name(s, num_shards);
    const std::string path = (fs::path(dir) / file).string();
    TANDEM_CHECK(fs::exists(path), "sharded weights in {}: shard {} is missing", dir, path);
    io::SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      TANDEM_CHECK(layout.has(name), "{}: '{}' is not a parameter of the model", path, name);
      found[name].push_back({file, io::metadata_int(f, "start." + name), f.info(name).numel()});
    }
  }
  nlohmann::json index = {{"format_version", kIndexVersion},
                          {"num_shards", num_shards},
                          {"tensors", nlohmann::json::object()}};
  for (const ParameterEntry& e : layout.entries()) {
    auto it = found.find(e.name);
    TANDEM_CHECK(it != found.end(), "sharded weights in {}: no shard holds '{}'", dir, e.name);
    io::ShardedTensor tensor{e.shape, std::move(it->second)};
    io::sort_and_check_tiling(tensor.pieces, e.numel,
                              fmt::format("sharded weights in {}: '{}'", dir, e.name));
    index["tensors"][e.name] = io::sharded_tensor_json(tensor);
  }
  core::write_file_atomic((fs::path(dir) / kIndexFile).string(), index.dump(1) + "\n");
}

void read_weight_ranges(const std::string& dir, std::vector<WeightSlice>& slices) {
  if (!is_sharded_model_dir(dir)) {
    // A whole model (rank 0's model.safetensors): each slice is a sub-range of its tensor.
    const std::string path = (fs::path(dir) / kWholeWeights).string();
    TANDEM_CHECK(fs::exists(path), "{}: neither {} nor {} (no model weights)", dir, kWholeWeights,
                 kIndexFile);
    io::SafetensorsFile f(path);
    for (WeightSlice& s : slices) {
      TANDEM_CHECK(f.has(s.name), "{}: missing tensor '{}'", path, s.name);
      const io::TensorInfo& info = f.info(s.name);
      TANDEM_CHECK(info.dtype == io::DType::kF32 && info.shape == s.shape,
                   "{}: tensor '{}' is not fp32 of shape {}", path, s.name,
                   nlohmann::json(s.shape).dump());
      std::memcpy(s.values.data(), f.raw(s.name).data() + s.start * sizeof(float),
                  s.values.size() * sizeof(float));
    }
    return;
  }
  const auto index = read_index(dir);
  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  io::ShardFiles files(dir, index_path);  // names from shards.json stay inside model/
  for (WeightSlice& s : slices) {
    auto it = index.find(s.name);
    TANDEM_CHECK(it != index.end(), "{}: no weights for parameter '{}'", index_path, s.name);
    TANDEM_CHECK(it->second.shape == s.shape, "{}: '{}' has shape {}, the model {}", index_path,
                 s.name, nlohmann::json(it->second.shape).dump(), nlohmann::json(s.shape).dump());
    const std::int64_t begin = s.start, end = s.start + static_cast<std::int64_t>(s.values.size());
    const std::int64_t filled = io::for_each_piece_in(
        it->second.pieces, begin, end, [&](const io::ShardPiece& p, auto lo, auto hi) {
          const io::SafetensorsFile& f = files.get(p.file);
          TANDEM_CHECK(f.has(s.name) && f.info(s.name).dtype == io::DType::kF32 &&
                           f.info(s.name).numel() == p.length,
                       "{}: '{}' is not {} fp32 values as the index says", f.path(), s.name,
                       p.length);
          TANDEM_CHECK(io::metadata_int(f, "start." + s.name) == p.start,
                       "{}: '{}' starts at another element than the index says", f.path(), s.name);
          std::memcpy(s.values.data() + (lo - begin),
                      f.raw(s.name).data() + (lo - p.start) * sizeof(float),
                      static_cast<std::size_t>(hi - lo) * sizeof(float));
        });
    TANDEM_CHECK(filled == end - begin, "{}: elements [{}, {}) of '{}' are not all stored",
                 index_path, begin, end, s.name);
  }
}

}  // namespace tandem::model
