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
#include "tandem/io/json.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/shard_index.h"

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

std::vector<std::int64_t> metadata_shape(const io::SafetensorsFile& f, const std::string& key) {
  const std::string& v = metadata_value(f, key);
  const nlohmann::json shape = io::parse_json(v, f.path() + ": metadata '" + key + "'");
  TANDEM_CHECK(shape.is_array(), "{}: metadata '{}' is '{}', not a shape", f.path(), key, v);
  std::vector<std::int64_t> out;
  for (const auto& d : shape)
    out.push_back(io::json_as<std::int64_t>(d, f.path() + ": metadata '" + key + "' entry"));
  return out;
}

// A slice's two moments with the tensor-name prefix each is stored under.
std::array<std::pair<const char*, std::span<float>>, 2> moments_of(MomentSlice& s) {
  return {{{"exp_avg.", s.exp_avg}, {"exp_avg_sq.", s.exp_avg_sq}}};
}

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
  std::map<std::string, io::ShardedTensor> tensors;
  std::int64_t adam_step = -1;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = optimizer_shard_file_name(s, num_shards);
    io::SafetensorsFile f((fs::path(optim_dir) / file).string());
    const std::int64_t step = io::metadata_int(f, "adam_step");
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
      io::ShardedTensor& t = tensors[name];
      TANDEM_CHECK(t.pieces.empty() || t.shape == shape,
                   "{}: '{}' has another shape than in the other shards", f.path(), name);
      t.shape = shape;
      t.pieces.push_back({file, io::metadata_int(f, "start." + name), length});
    }
  }
  nlohmann::json index = {{"format_version", kIndexVersion},
                          {"num_shards", num_shards},
                          {"adam_step", adam_step},
                          {"tensors", nlohmann::json::object()}};
  for (auto& [name, t] : tensors) {
    io::sort_and_check_tiling(t.pieces, numel_of(t.shape),
                              fmt::format("optimizer shards in {}: '{}'", optim_dir, name));
    index["tensors"][name] = io::sharded_tensor_json(t);
  }
  core::write_file_atomic((fs::path(optim_dir) / kIndexFile).string(), index.dump(1) + "\n");
}

OptimizerIndex parse_optimizer_index(std::string_view text, const std::string& where) {
  const nlohmann::json index = io::parse_json(text, where);
  TANDEM_CHECK(index.is_object(), "{}: expected a JSON object", where);
  OptimizerIndex out;
  const int version = io::json_field<int>(index, "format_version", where);
  TANDEM_CHECK(version == kIndexVersion, "{}: format version {} is not supported (expected {})",
               where, version, kIndexVersion);
  out.num_shards = io::json_field<int>(index, "num_shards", where);
  TANDEM_CHECK(out.num_shards >= 1, "{}: num_shards {} must be at least 1", where, out.num_shards);
  out.adam_step = io::json_field<std::int64_t>(index, "adam_step", where);
  TANDEM_CHECK(out.adam_step >= 0, "{}: adam_step {} is negative", where, out.adam_step);
  out.tensors = io::parse_sharded_tensors(io::json_field<nlohmann::json>(index, "tensors", where),
                                          where, "optim/");
  return out;
}

std::int64_t read_optimizer_state(const std::string& optim_dir, std::vector<MomentSlice>& slices) {
  const std::string index_path = (fs::path(optim_dir) / kIndexFile).string();
  TANDEM_CHECK(fs::exists(index_path), "checkpoint has no optimizer state ({} is missing)",
               index_path);
  const OptimizerIndex index = parse_optimizer_index(core::read_file(index_path), index_path);
  io::ShardFiles files(optim_dir, index_path);  // names from index.json stay inside optim/
  for (MomentSlice& s : slices) {
    auto it = index.tensors.find(s.name);
    TANDEM_CHECK(it != index.tensors.end(), "{}: no optimizer state for parameter '{}'", index_path,
                 s.name);
    const OptimizerIndex::Tensor& t = it->second;
    TANDEM_CHECK(t.shape == s.shape, "{}: '{}' has shape {} in the checkpoint, {} in the model",
                 index_path, s.name, nlohmann::json(t.shape).dump(),
                 nlohmann::json(s.shape).dump());
    const std::int64_t begin = s.start, end = s.start + static_cast<std::int64_t>(s.exp_avg.size());
    const std::int64_t filled =
        io::for_each_piece_in(t.pieces, begin, end, [&](const io::ShardPiece& p, auto lo, auto hi) {
          const io::SafetensorsFile& f = files.get(p.file);
          for (auto& [prefix, dst] : moments_of(s)) {
            const std::string tensor = prefix + s.name;
            TANDEM_CHECK(f.has(tensor) && f.info(tensor).dtype == io::DType::kF32 &&
                             f.info(tensor).numel() == p.length,
                         "{}: '{}' is not {} fp32 values as the index says", f.path(), tensor,
                         p.length);
            std::memcpy(dst.data() + (lo - begin),
                        f.raw(tensor).data() + (lo - p.start) * sizeof(float),
                        static_cast<std::size_t>(hi - lo) * sizeof(float));
          }
        });
    TANDEM_CHECK(filled == end - begin, "{}: elements [{}, {}) of '{}' are not all stored",
                 index_path, begin, end, s.name);
  }
  return index.adam_step;
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
  return io::metadata_int(f, "adam_step");
}

}  // namespace tandem::train
