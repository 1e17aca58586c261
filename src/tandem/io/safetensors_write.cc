// safetensors writer: the layout the Rust safetensors library produces (compact JSON header,
// "__metadata__" first, tensors in order, padded with spaces to a multiple of 8 bytes), written
// atomically.
#include <cstring>
#include <set>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/safetensors_detail.h"

namespace tandem::io {

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  std::vector<std::uint64_t> sizes;
  std::uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    TANDEM_CHECK(!t.name.empty() && t.name != "__metadata__",
                 "{}: invalid tensor name '{}' for safetensors", path, t.name);
    TANDEM_CHECK(seen.insert(t.name).second, "{}: tensor '{}' is given twice", path, t.name);
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
      TANDEM_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension {}", path, t.name, d);
      TANDEM_CHECK(d == 0 || numel <= (std::uint64_t{1} << 56) / static_cast<std::uint64_t>(d),
                   "{}: tensor '{}' has too many elements", path, t.name);
      numel *= static_cast<std::uint64_t>(d);
    }
    std::uint64_t bytes = numel * dtype_size(t.dtype);
    TANDEM_CHECK(bytes == 0 || t.data != nullptr, "{}: tensor '{}' has no data", path, t.name);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: cannot encode the header (tensor names and metadata must be UTF-8): {}", path,
               e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  core::AtomicFileWriter out(path);
  std::uint64_t header_len = text.size();
  unsigned char length_bytes[8];
  std::memcpy(length_bytes, &header_len, 8);  // little-endian (asserted in safetensors.cc)
  out.write(length_bytes, 8);
  out.write(text);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > 0) out.write(tensors[i].data, sizes[i]);
  }
  out.commit();
}

}  // namespace tandem::io
