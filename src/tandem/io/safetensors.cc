// safetensors reader: an 8-byte little-endian header length, a JSON header, then the data section.
// Every claim of the header is checked against the file before any tensor is handed out.
#include "tandem/io/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/io/safetensors_detail.h"

namespace tandem::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace safetensors_detail {

const DTypeSpec* find_dtype(std::string_view name) {
  // Every dtype the format defines (safetensors 0.8); only three convert to floats here.
  static constexpr std::array<DTypeSpec, 20> kSpecs = {{
      {"F32", 32, DType::kF32},     {"BF16", 16, DType::kBF16},   {"F16", 16, DType::kF16},
      {"F64", 64, std::nullopt},    {"I64", 64, std::nullopt},    {"U64", 64, std::nullopt},
      {"I32", 32, std::nullopt},    {"U32", 32, std::nullopt},    {"I16", 16, std::nullopt},
      {"U16", 16, std::nullopt},    {"I8", 8, std::nullopt},      {"U8", 8, std::nullopt},
      {"BOOL", 8, std::nullopt},    {"F8_E5M2", 8, std::nullopt}, {"F8_E4M3", 8, std::nullopt},
      {"F8_E8M0", 8, std::nullopt}, {"F6_E2M3", 6, std::nullopt}, {"F6_E3M2", 6, std::nullopt},
      {"F4", 4, std::nullopt},      {"C64", 64, std::nullopt},
  }};
  for (const DTypeSpec& spec : kSpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

nlohmann::json parse_json_strict(std::string_view text, const std::string& where) {
  return parse_json(text, where);
}

}  // namespace safetensors_detail

namespace {

using io::safetensors_detail::DTypeSpec;

// A JSON value as a non-negative integer, or nullopt (negative, fractional, not a number).
std::optional<std::uint64_t> as_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  return std::nullopt;
}

struct ParsedEntry {
  TensorInfo info;
  const DTypeSpec* spec = nullptr;
};

}  // namespace

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  core::fail("invalid DType value {}", static_cast<int>(dtype));
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
  }
  core::fail("invalid DType value {}", static_cast<int>(dtype));
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) { parse_header(); }

void SafetensorsFile::parse_header() {
  const std::string& where = file_.path();
  const std::uint64_t file_size = file_.size();
  TANDEM_CHECK(file_size >= 8,
               "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", where,
               file_size);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);
  TANDEM_CHECK(header_len <= io::safetensors_detail::kMaxHeaderBytes,
               "{}: header length {} is above the {} byte limit (corrupt or not safetensors)",
               where, header_len, io::safetensors_detail::kMaxHeaderBytes);
  TANDEM_CHECK(header_len <= file_size - 8,
               "{}: header length {} runs past the end of the file ({} bytes follow the length; "
               "truncated?)",
               where, header_len, file_size - 8);
  TANDEM_CHECK(header_len >= 2 && file_.data()[8] == '{',
               "{}: the header does not start with '{{' (not a safetensors file?)", where);
  data_offset_ = 8 + header_len;
  const std::uint64_t data_size = file_size - data_offset_;

  std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), header_len);
  nlohmann::json header = io::safetensors_detail::parse_json_strict(text, where);
  TANDEM_CHECK(header.is_object(), "{}: the JSON header is a {}, expected an object", where,
               header.type_name());

  std::vector<ParsedEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      TANDEM_CHECK(value.is_object(), "{}: __metadata__ is a {}, expected an object of strings",
                   where, value.type_name());
      for (const auto& [key, text_value] : value.items()) {
        TANDEM_CHECK(text_value.is_string(), "{}: __metadata__ key '{}' is a {}, expected a string",
                     where, key, text_value.type_name());
        metadata_[key] = text_value.get<std::string>();
      }
      continue;
    }
    TANDEM_CHECK(value.is_object(), "{}: tensor '{}': entry is a {}, expected an object", where,
                 name, value.type_name());
    for (const auto& [key, unused] : value.items()) {
      TANDEM_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                   "{}: tensor '{}': unknown key '{}' (expected dtype, shape, data_offsets)", where,
                   name, key);
    }
    TANDEM_CHECK(value.contains("dtype") && value["dtype"].is_string(),
                 "{}: tensor '{}': missing or non-string 'dtype'", where, name);
    std::string dtype_text = value["dtype"].get<std::string>();
    const DTypeSpec* spec = io::safetensors_detail::find_dtype(dtype_text);
    TANDEM_CHECK(spec != nullptr, "{}: tensor '{}': unknown dtype '{}'", where, name, dtype_text);

    TANDEM_CHECK(value.contains("shape") && value["shape"].is_array(),
                 "{}: tensor '{}': missing or non-array 'shape'", where, name);
    ParsedEntry entry;
    entry.spec = spec;
    entry.info.name = name;
    entry.info.dtype = spec->dtype.value_or(DType::kF32);
    // numel x bits must stay well inside 64 bits; anything near that cannot fit a real file.
    constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 56;
    std::uint64_t numel = 1;
    for (const nlohmann::json& dim : value["shape"]) {
      std::optional<std::uint64_t> d = as_count(dim);
      TANDEM_CHECK(d.has_value(), "{}: tensor '{}': shape entry {} is not a non-negative integer",
                   where, name, dim.dump());
      TANDEM_CHECK(*d <= kMaxElements && (*d == 0 || numel <= kMaxElements / *d),
                   "{}: tensor '{}': shape {} has too many elements", where, name,
                   value["shape"].dump());
      numel *= *d;
      entry.info.shape.push_back(static_cast<std::int64_t>(*d));
    }

    const nlohmann::json* offsets =
        value.contains("data_offsets") ? &value["data_offsets"] : nullptr;
    TANDEM_CHECK(offsets != nullptr && offsets->is_array() && offsets->size() == 2,
                 "{}: tensor '{}': 'data_offsets' must be an array [begin, end]", where, name);
    std::optional<std::uint64_t> begin = as_count((*offsets)[0]);
    std::optional<std::uint64_t> end = as_count((*offsets)[1]);
    TANDEM_CHECK(begin && end, "{}: tensor '{}': data_offsets {} are not non-negative integers",
                 where, name, offsets->dump());
    TANDEM_CHECK(*begin <= *end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin",
                 where, name, *begin, *end);
    TANDEM_CHECK(*end <= data_size,
                 "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section "
                 "({} bytes; truncated?)",
                 where, name, *begin, *end, data_size);
    std::uint64_t bits = numel * static_cast<std::uint64_t>(spec->bits);
    TANDEM_CHECK(bits % 8 == 0, "{}: tensor '{}': {} elements of {} do not fill whole bytes", where,
                 name, numel, dtype_text);
    TANDEM_CHECK(bits / 8 == *end - *begin,
                 "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}",
                 where, name, value["shape"].dump(), dtype_text, bits / 8, *begin, *end,
                 *end - *begin);
    entry.info.begin = *begin;
    entry.info.end = *end;
    entries.push_back(std::move(entry));
  }

  // The spans must tile the data section exactly: sorted by offset, each starts where the last
  // ended, the first at 0 and the last at the end of the file.
  std::vector<const ParsedEntry*> order;
  for (const ParsedEntry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
    return std::tie(a->info.begin, a->info.end) < std::tie(b->info.begin, b->info.end);
  });
  std::uint64_t covered = 0;
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry* e : order) {
    const TensorInfo& info = e->info;
    if (info.begin < covered) {
      core::fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", where,
                 info.name, info.begin, info.end, previous->info.name, previous->info.begin,
                 previous->info.end);
    }
    if (info.begin > covered) {
      if (previous == nullptr) {
        core::fail(
            "{}: tensor '{}': data_offsets [{}, {}] leave a gap of {} unused bytes at the start "
            "of the data section",
            where, info.name, info.begin, info.end, info.begin);
      }
      core::fail(
          "{}: tensor '{}': data_offsets [{}, {}] leave a gap of {} unused bytes after tensor "
          "'{}' (ends at {})",
          where, info.name, info.begin, info.end, info.begin - covered, previous->info.name,
          covered);
    }
    covered = info.end;
    previous = e;
  }
  if (covered != data_size) {
    core::fail("{}: {} bytes at the end of the data section (from {} to {}) belong to no tensor",
               where, data_size - covered, covered, data_size);
  }

  for (ParsedEntry& e : entries) {
    if (e.spec->dtype.has_value()) {
      tensors_.emplace(e.info.name, std::move(e.info));
    } else {
      unsupported_.emplace(e.info.name, std::string(e.spec->name));
    }
  }
}

bool SafetensorsFile::has(const std::string& name) const {
  return tensors_.count(name) != 0 || unsupported_.count(name) != 0;
}

std::string SafetensorsFile::unsupported_dtype(const std::string& name) const {
  auto it = unsupported_.find(name);
  if (it != unsupported_.end()) return it->second;
  if (tensors_.count(name) == 0) core::fail("{}: no tensor named '{}'", path(), name);
  return "";
}

const TensorInfo& SafetensorsFile::supported_info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  auto unsupported = unsupported_.find(name);
  if (unsupported != unsupported_.end()) {
    core::fail(
        "{}: tensor '{}' has dtype {}, which tandem does not read (supported: F32, BF16, F16)",
        path(), name, unsupported->second);
  }
  core::fail("{}: no tensor named '{}'", path(), name);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  return supported_info(name);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, unused] : tensors_) out.push_back(name);
  for (const auto& [name, unused] : unsupported_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::span<const std::uint8_t> SafetensorsFile::raw(const std::string& name) const {
  const TensorInfo& t = supported_info(name);
  return {file_.data() + data_offset_ + t.begin, static_cast<std::size_t>(t.end - t.begin)};
}

void SafetensorsFile::read_f32_into(const std::string& name, std::span<float> out) const {
  const TensorInfo& t = supported_info(name);
  TANDEM_CHECK(out.size() == static_cast<std::size_t>(t.numel()),
               "{}: tensor '{}' has {} elements, destination holds {}", path(), name, t.numel(),
               out.size());
  read_f32_range_into(name, 0, out);
}

void SafetensorsFile::read_f32_range_into(const std::string& name, std::int64_t start,
                                          std::span<float> out) const {
  const TensorInfo& t = supported_info(name);
  const auto count = static_cast<std::int64_t>(out.size());
  TANDEM_CHECK(start >= 0 && start <= t.numel() && count <= t.numel() - start,
               "{}: elements [{}, {}) of tensor '{}' lie outside its {} elements", path(), start,
               start + count, name, t.numel());
  if (count == 0) return;
  const std::size_t offset = static_cast<std::size_t>(start) * dtype_size(t.dtype);
  io::safetensors_detail::convert_to_f32(t.dtype, file_.data() + data_offset_ + t.begin + offset,
                                         out.size(), out.data());
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  std::vector<float> out(static_cast<std::size_t>(supported_info(name).numel()));
  read_f32_into(name, out);
  return out;
}

}  // namespace tandem::io
