#include "tandem/io/npy.h"

#include <cstring>
#include <regex>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::io {
namespace {

struct DtypeInfo {
  NpyDtype dtype;
  const char* descr;
  std::size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {NpyDtype::kF32, "<f4", 4}, {NpyDtype::kF64, "<f8", 8}, {NpyDtype::kI32, "<i4", 4},
    {NpyDtype::kI64, "<i8", 8}, {NpyDtype::kU16, "<u2", 2}, {NpyDtype::kU32, "<u4", 4},
    {NpyDtype::kU64, "<u8", 8}, {NpyDtype::kU8, "|u1", 1},
};

const DtypeInfo& info(NpyDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  core::fail("unknown npy dtype");
}

}  // namespace

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::size_t NpyArray::item_size() const { return info(dtype).size; }

std::vector<float> NpyArray::as_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (dtype == NpyDtype::kF32) {
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
  } else if (dtype == NpyDtype::kF64) {
    const double* p = reinterpret_cast<const double*>(bytes.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
  } else {
    core::fail("{}: expected a float array, found dtype {}", source, info(dtype).descr);
  }
  return out;
}

std::vector<std::int64_t> NpyArray::as_i64() const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint8_t* p = bytes.data() + i * item_size();
    switch (dtype) {
      case NpyDtype::kI32:
        out[i] = *reinterpret_cast<const std::int32_t*>(p);
        break;
      case NpyDtype::kI64:
        out[i] = *reinterpret_cast<const std::int64_t*>(p);
        break;
      case NpyDtype::kU16:
        out[i] = *reinterpret_cast<const std::uint16_t*>(p);
        break;
      case NpyDtype::kU32:
        out[i] = *reinterpret_cast<const std::uint32_t*>(p);
        break;
      case NpyDtype::kU8:
        out[i] = *p;
        break;
      case NpyDtype::kU64: {
        std::uint64_t v = *reinterpret_cast<const std::uint64_t*>(p);
        TANDEM_CHECK(v <= static_cast<std::uint64_t>(INT64_MAX), "{}: value {} too large", source,
                     v);
        out[i] = static_cast<std::int64_t>(v);
        break;
      }
      default:
        core::fail("{}: expected an integer array, found dtype {}", source, info(dtype).descr);
    }
  }
  return out;
}

NpyArray read_npy(const std::string& path) {
  std::string raw = core::read_file(path);
  TANDEM_CHECK(raw.size() >= 10 && std::memcmp(raw.data(), "\x93NUMPY", 6) == 0,
               "{}: not a .npy file (bad magic)", path);
  const int major = static_cast<unsigned char>(raw[6]);
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(raw[8]) | (static_cast<unsigned char>(raw[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    TANDEM_CHECK(raw.size() >= 12, "{}: truncated .npy header", path);
    std::uint32_t h;
    std::memcpy(&h, raw.data() + 8, 4);
    header_len = h;
    offset = 12;
  } else {
    core::fail("{}: unsupported .npy version {}", path, major);
  }
  TANDEM_CHECK(offset + header_len <= raw.size(), "{}: truncated .npy header", path);
  std::string header = raw.substr(offset, header_len);

  NpyArray arr;
  arr.source = path;
  std::smatch m;
  TANDEM_CHECK(std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'")),
               "{}: .npy header has no descr", path);
  std::string descr = m[1];
  if (descr == "<u1") descr = "|u1";
  bool found = false;
  for (const auto& i : kDtypes) {
    if (descr == i.descr) {
      arr.dtype = i.dtype;
      found = true;
    }
  }
  TANDEM_CHECK(found, "{}: unsupported .npy dtype '{}'", path, descr);
  TANDEM_CHECK(std::regex_search(header, m, std::regex("'fortran_order':\\s*(True|False)")) &&
                   m[1] == "False",
               "{}: only C-order .npy arrays are supported", path);
  TANDEM_CHECK(std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")),
               "{}: .npy header has no shape", path);
  std::string dims = m[1];
  std::regex num("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator();
       ++it)
    arr.shape.push_back(std::stoll(it->str()));
  std::size_t nbytes = static_cast<std::size_t>(arr.numel()) * arr.item_size();
  TANDEM_CHECK(raw.size() - offset - header_len == nbytes,
               "{}: data is {} bytes, shape and dtype need {}", path,
               raw.size() - offset - header_len, nbytes);
  arr.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(offset + header_len), raw.end());
  return arr;
}

void write_npy(const std::string& path, NpyDtype dtype, const std::vector<std::int64_t>& shape,
               const void* data) {
  std::int64_t n = 1;
  std::string dims;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dims += (i ? ", " : "") + std::to_string(shape[i]);
    n *= shape[i];
  }
  if (shape.size() == 1) dims += ",";  // numpy writes a 1-tuple as "(n,)"
  std::string header = "{'descr': '" + std::string(info(dtype).descr) +
                       "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad so that magic + length + header + '\n' is a multiple of 64.
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), static_cast<std::size_t>(n) * info(dtype).size);
  core::write_file_atomic(path, out);
}

void write_npy_f32(const std::string& path, const std::vector<std::int64_t>& shape,
                   const float* data) {
  write_npy(path, NpyDtype::kF32, shape, data);
}

void write_npy_i64(const std::string& path, const std::vector<std::int64_t>& shape,
                   const std::int64_t* data) {
  write_npy(path, NpyDtype::kI64, shape, data);
}

}  // namespace tandem::io
