#include "tandem/model/weight_shards.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/path_inside.h"
#include "tandem/io/json.h"
#include "tandem/io/safetensors.h"

namespace fs = std::filesystem;

namespace tandem::model {
namespace {

constexpr int kIndexVersion = 1;
constexpr const char* kIndexFile = "shards.json";
constexpr const char* kWholeWeights = "model.safetensors";

std::int64_t metadata_int(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  TANDEM_CHECK(it != f.metadata().end(), "{}: no '{}' in its metadata", f.path(), key);
  const std::string& v = it->second;
  std::int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  TANDEM_CHECK(ec == std::errc() && end == v.data() + v.size() && !v.empty(),
               "{}: metadata '{}' is '{}', not an integer", f.path(), key, v);
  return out;
}

struct Piece {
  std::string file;
  std::int64_t start = 0, length = 0;
};

// shards.json, parsed and checked against the layout: every parameter present with its shape,
// pieces tiling its elements (sorted, no gap, no overlap), plain file names.
struct IndexedTensor {
  std::vector<std::int64_t> shape;
  std::vector<Piece> pieces;
};

std::map<std::string, IndexedTensor> read_index(const std::string& dir) {
  const std::string where = (fs::path(dir) / kIndexFile).string();
  TANDEM_CHECK(fs::exists(where), "{} is missing (sharded model weights need their index)", where);
  const nlohmann::json index = io::parse_json(core::read_file(where), where);
  TANDEM_CHECK(index.is_object(), "{}: expected a JSON object", where);
  const int version = io::json_field<int>(index, "format_version", where);
  TANDEM_CHECK(version == kIndexVersion, "{}: format version {} is not supported (expected {})",
               where, version, kIndexVersion);
  const auto tensors = io::json_field<nlohmann::json>(index, "tensors", where);
  TANDEM_CHECK(tensors.is_object(), "{}: 'tensors' must be an object", where);
  std::map<std::string, IndexedTensor> out;
  for (const auto& [name, t] : tensors.items()) {
    const std::string at = where + ": tensor '" + name + "'";
    const auto shape_json = io::json_field<nlohmann::json>(t, "shape", at);
    TANDEM_CHECK(shape_json.is_array(), "{}: 'shape' must be a list", at);
    std::vector<std::int64_t> shape;
    std::int64_t numel = 1;
    for (const auto& dim : shape_json) {
      const auto d = io::json_as<std::int64_t>(dim, at + " shape entry");
      TANDEM_CHECK(d >= 0 && d < (std::int64_t{1} << 40),
                   "{}: shape entry {} is negative or too "
                   "large",
                   at, d);
      numel *= d;
      shape.push_back(d);
    }
    std::int64_t covered = 0;
    std::vector<Piece> pieces;
    const auto pieces_json = io::json_field<nlohmann::json>(t, "pieces", at);
    TANDEM_CHECK(pieces_json.is_array(), "{}: 'pieces' must be a list", at);
    for (const auto& p : pieces_json) {
      Piece piece{io::json_field<std::string>(p, "file", at + " piece"),
                  io::json_field<std::int64_t>(p, "start", at + " piece"),
                  io::json_field<std::int64_t>(p, "length", at + " piece")};
      TANDEM_CHECK(piece.start == covered && piece.length > 0 && piece.length <= numel - covered,
                   "{}: piece [{}, +{}) of {} does not continue at element {} (a gap, an overlap "
                   "or past the end of {} elements)",
                   at, piece.start, piece.length, piece.file, covered, numel);
      TANDEM_CHECK(piece.file.find('/') == std::string::npos && piece.file != ".." &&
                       piece.file != "." && !piece.file.empty(),
                   "{}: piece file '{}' is not a plain file name", at, piece.file);
      covered += piece.length;
      pieces.push_back(std::move(piece));
    }
    TANDEM_CHECK(covered == numel, "{}: pieces cover {} of its {} elements", at, covered, numel);
    out.emplace(name, IndexedTensor{shape, std::move(pieces)});
  }
  return out;
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
  std::map<std::string, std::vector<Piece>> found;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = weight_shard_file_name(s, num_shards);
    const std::string path = (fs::path(dir) / file).string();
    TANDEM_CHECK(fs::exists(path), "sharded weights in {}: shard {} is missing", dir, path);
    io::SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      TANDEM_CHECK(layout.has(name), "{}: '{}' is not a parameter of the model", path, name);
      found[name].push_back({file, metadata_int(f, "start." + name), f.info(name).numel()});
    }
  }
  nlohmann::json index = {{"format_version", kIndexVersion},
                          {"num_shards", num_shards},
                          {"tensors", nlohmann::json::object()}};
  for (const ParameterEntry& e : layout.entries()) {
    auto it = found.find(e.name);
    TANDEM_CHECK(it != found.end(), "sharded weights in {}: no shard holds '{}'", dir, e.name);
    auto& pieces = it->second;
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.start < b.start; });
    std::int64_t covered = 0;
    nlohmann::json list = nlohmann::json::array();
    for (const Piece& p : pieces) {
      TANDEM_CHECK(p.start == covered, "sharded weights in {}: '{}' has {} at element {} ({})", dir,
                   e.name, p.start < covered ? "an overlap" : "a gap", covered, p.file);
      covered += p.length;
      list.push_back({{"file", p.file}, {"start", p.start}, {"length", p.length}});
    }
    TANDEM_CHECK(covered == e.numel, "sharded weights in {}: '{}' covers {} of its {} elements",
                 dir, e.name, covered, e.numel);
    index["tensors"][e.name] = {{"shape", e.shape}, {"pieces", list}};
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
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> open;
  auto file = [&](const std::string& name) -> const io::SafetensorsFile& {
    auto& f = open[name];
    if (!f) {
      const std::string path = core::path_inside(dir, name, index_path);
      TANDEM_CHECK(fs::exists(path), "{}: shard {} named by the index is missing", index_path,
                   path);
      f = std::make_unique<io::SafetensorsFile>(path);
    }
    return *f;
  };
  for (WeightSlice& s : slices) {
    auto it = index.find(s.name);
    TANDEM_CHECK(it != index.end(), "{}: no weights for parameter '{}'", index_path, s.name);
    TANDEM_CHECK(it->second.shape == s.shape, "{}: '{}' has shape {}, the model {}", index_path,
                 s.name, nlohmann::json(it->second.shape).dump(), nlohmann::json(s.shape).dump());
    const std::int64_t begin = s.start, end = s.start + static_cast<std::int64_t>(s.values.size());
    std::int64_t filled = 0;
    for (const Piece& p : it->second.pieces) {
      const std::int64_t lo = std::max(begin, p.start), hi = std::min(end, p.start + p.length);
      if (lo >= hi) continue;
      const io::SafetensorsFile& f = file(p.file);
      TANDEM_CHECK(f.has(s.name) && f.info(s.name).dtype == io::DType::kF32 &&
                       f.info(s.name).numel() == p.length,
                   "{}: '{}' is not {} fp32 values as the index says", f.path(), s.name, p.length);
      TANDEM_CHECK(metadata_int(f, "start." + s.name) == p.start,
                   "{}: '{}' starts at another element than the index says", f.path(), s.name);
      std::memcpy(s.values.data() + (lo - begin),
                  f.raw(s.name).data() + (lo - p.start) * sizeof(float),
                  static_cast<std::size_t>(hi - lo) * sizeof(float));
      filled += hi - lo;
    }
    TANDEM_CHECK(filled == end - begin, "{}: elements [{}, {}) of '{}' are not all stored",
                 index_path, begin, end, s.name);
  }
}

}  // namespace tandem::model
