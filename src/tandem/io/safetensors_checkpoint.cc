// A safetensors checkpoint: one file, a directory with model.safetensors, or an HF sharded
// directory whose model.safetensors.index.json maps every tensor to its shard file.
#include <filesystem>
#include <set>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/path_inside.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/safetensors_detail.h"

namespace tandem::io {

namespace fs = std::filesystem;

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  TANDEM_CHECK(fs::exists(status), "checkpoint {} does not exist", path);
  if (!fs::is_directory(status)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
  } else {
    fs::path index = fs::path(path) / "model.safetensors.index.json";
    fs::path single = fs::path(path) / "model.safetensors";
    if (fs::exists(index)) {
      open_index(path, index.string());
      return;
    }
    TANDEM_CHECK(fs::exists(single),
                 "checkpoint directory {} has neither model.safetensors nor "
                 "model.safetensors.index.json",
                 path);
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
  }
  for (const std::string& name : files_[0]->names()) owner_[name] = 0;
}

void SafetensorsCheckpoint::open_index(const std::string& dir, const std::string& index_path) {
  nlohmann::json index =
      io::safetensors_detail::parse_json_strict(core::read_file(index_path), index_path);
  TANDEM_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               "{}: expected an object with a 'weight_map' object (tensor name -> shard file)",
               index_path);
  const nlohmann::json& weight_map = index["weight_map"];
  TANDEM_CHECK(!weight_map.empty(), "{}: 'weight_map' lists no tensors", index_path);

  // Open each named shard once, in name order.
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::map<std::string, std::size_t> file_index;
  for (const auto& [tensor, shard_value] : weight_map.items()) {
    TANDEM_CHECK(shard_value.is_string(),
                 "{}: weight_map entry for tensor '{}' is a {}, expected "
                 "a shard file name",
                 index_path, tensor, shard_value.type_name());
    std::string shard = shard_value.get<std::string>();
    // Absolute names, '..' and symbolic links out of the directory are refused.
    core::path_inside(dir, shard, fmt::format("{}: tensor '{}'", index_path, tensor));
    shard_of[tensor] = shard;
    file_index.emplace(shard, 0);
  }
  for (auto& [shard, position] : file_index) {
    fs::path shard_path = core::path_inside(dir, shard, index_path);
    if (!fs::is_regular_file(shard_path)) {
      std::string example;
      for (const auto& [tensor, s] : shard_of) {
        if (s == shard) {
          example = tensor;
          break;
        }
      }
      core::fail("{}: shard {} (holding tensor '{}') is missing from {}", index_path, shard,
                 example, dir);
    }
    position = files_.size();
    files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
  }

  // Every tensor lives in exactly one shard, the one the index names.
  std::map<std::string, std::string> found_in;
  for (const auto& [shard, position] : file_index) {
    for (const std::string& tensor : files_[position]->names()) {
      auto [it, inserted] = found_in.emplace(tensor, shard);
      TANDEM_CHECK(inserted, "{}: tensor '{}' is stored in two shards, {} and {}", dir, tensor,
                   it->second, shard);
      TANDEM_CHECK(shard_of.count(tensor) != 0,
                   "{}: shard {} holds tensor '{}', which the index does not list", index_path,
                   shard, tensor);
    }
  }
  for (const auto& [tensor, shard] : shard_of) {
    auto it = found_in.find(tensor);
    TANDEM_CHECK(it != found_in.end(),
                 "{}: tensor '{}' is missing from shard {} (the index says "
                 "it is there)",
                 index_path, tensor, shard);
    TANDEM_CHECK(it->second == shard, "{}: the index puts tensor '{}' in shard {}, but it is in {}",
                 index_path, tensor, shard, it->second);
    owner_[tensor] = file_index.at(shard);
  }
}

bool SafetensorsCheckpoint::has(const std::string& name) const { return owner_.count(name) != 0; }

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) core::fail("checkpoint {}: no tensor named '{}'", path_, name);
  return *files_[it->second];
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  return file_of(name).info(name);
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, unused] : owner_) out.push_back(name);
  return out;
}

std::vector<float> SafetensorsCheckpoint::read_f32(const std::string& name) const {
  return file_of(name).read_f32(name);
}

void SafetensorsCheckpoint::read_f32_into(const std::string& name, std::span<float> out) const {
  file_of(name).read_f32_into(name, out);
}

void SafetensorsCheckpoint::read_f32_range_into(const std::string& name, std::int64_t start,
                                                std::span<float> out) const {
  file_of(name).read_f32_range_into(name, start, out);
}

std::span<const std::uint8_t> SafetensorsCheckpoint::raw(const std::string& name) const {
  return file_of(name).raw(name);
}

}  // namespace tandem::io
