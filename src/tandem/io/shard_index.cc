#include "tandem/io/shard_index.h"

#include <charconv>
#include <filesystem>

#include "tandem/core/error.h"
#include "tandem/core/path_inside.h"
#include "tandem/io/json.h"

namespace tandem::io {

std::map<std::string, ShardedTensor> parse_sharded_tensors(const nlohmann::json& tensors,
                                                           const std::string& where,
                                                           const std::string& folder) {
  TANDEM_CHECK(tensors.is_object(), "{}: 'tensors' must be an object", where);
  // Element counts stay far below 2^62, so sums of starts and lengths cannot overflow.
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 50;
  std::map<std::string, ShardedTensor> out;
  for (const auto& [name, t] : tensors.items()) {
    const std::string at = where + ": tensor '" + name + "'";
    ShardedTensor tensor;
    const auto shape = json_field<nlohmann::json>(t, "shape", at);
    TANDEM_CHECK(shape.is_array(), "{}: 'shape' must be a list", at);
    std::int64_t numel = 1;
    for (const auto& d : shape) {
      const auto dim = json_as<std::int64_t>(d, at + " shape entry");
      TANDEM_CHECK(dim >= 0 && (dim == 0 || numel <= kMaxElements / dim),
                   "{}: shape {} is negative or too large", at, json_excerpt(shape));
      numel *= dim;
      tensor.shape.push_back(dim);
    }
    const auto pieces = json_field<nlohmann::json>(t, "pieces", at);
    TANDEM_CHECK(pieces.is_array(), "{}: 'pieces' must be a list", at);
    std::int64_t covered = 0;
    for (const auto& p : pieces) {
      ShardPiece piece;
      piece.file = json_field<std::string>(p, "file", at + " piece");
      piece.start = json_field<std::int64_t>(p, "start", at + " piece");
      piece.length = json_field<std::int64_t>(p, "length", at + " piece");
      TANDEM_CHECK(piece.start == covered && piece.length > 0 && piece.length <= numel - covered,
                   "{}: piece [{}, +{}) of {} does not continue at element {} (a gap, an overlap "
                   "or past the end of {} elements)",
                   at, piece.start, piece.length, piece.file, covered, numel);
      TANDEM_CHECK(piece.file.find('/') == std::string::npos && piece.file != ".." &&
                       piece.file != "." && !piece.file.empty(),
                   "{}: piece file '{}' is not a plain file name inside {}", at, piece.file,
                   folder);
      covered += piece.length;
      tensor.pieces.push_back(std::move(piece));
    }
    TANDEM_CHECK(covered == numel, "{}: pieces cover {} of its {} elements", at, covered, numel);
    out.emplace(name, std::move(tensor));
  }
  return out;
}

nlohmann::json sharded_tensor_json(const ShardedTensor& tensor) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const ShardPiece& p : tensor.pieces)
    pieces.push_back({{"file", p.file}, {"start", p.start}, {"length", p.length}});
  return {{"shape", tensor.shape}, {"pieces", pieces}};
}

void sort_and_check_tiling(std::vector<ShardPiece>& pieces, std::int64_t numel,
                           const std::string& what) {
  std::sort(pieces.begin(), pieces.end(),
            [](const ShardPiece& a, const ShardPiece& b) { return a.start < b.start; });
  std::int64_t covered = 0;
  for (const ShardPiece& p : pieces) {
    TANDEM_CHECK(p.start == covered, "{} has {} at element {} ({})", what,
                 p.start < covered ? "an overlap" : "a gap", covered, p.file);
    covered += p.length;
  }
  TANDEM_CHECK(covered == numel, "{} covers {} of its {} elements", what, covered, numel);
}

const SafetensorsFile& ShardFiles::get(const std::string& name) {
  auto& f = open_[name];
  if (!f) {
    const std::string path = core::path_inside(dir_, name, index_path_);
    TANDEM_CHECK(std::filesystem::exists(path), "{}: shard {} named by the index is missing",
                 index_path_, path);
    f = std::make_unique<SafetensorsFile>(path);
  }
  return *f;
}

std::int64_t metadata_int(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  TANDEM_CHECK(it != f.metadata().end(), "{}: no '{}' in its metadata", f.path(), key);
  const std::string& v = it->second;
  std::int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  TANDEM_CHECK(ec == std::errc() && end == v.data() + v.size() && !v.empty(),
               "{}: metadata '{}' is '{}', not an integer that fits 64 bits", f.path(), key, v);
  return out;
}

}  // namespace tandem::io
