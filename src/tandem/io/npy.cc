#include "tandem/io/npy.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

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
  // read_npy bounds a non-empty shape's product by the file size; an empty one is 0 however
  // large its other dimensions are.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::size_t NpyArray::item_size() const { return info(dtype).size; }

std::vector<float> NpyArray::as_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (dtype == NpyDtype::kF32) {
    // An empty array has no buffers (null pointers, which memcpy must not get even for 0 bytes).
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
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

namespace {

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// (numpy writes exactly these three keys). Parsed strictly: unknown, repeated or missing keys, a
// negative or non-integer dimension and trailing text are errors.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  void parse(std::string& descr, bool& fortran, std::vector<std::int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        TANDEM_CHECK(!have_descr, "{}: .npy header repeats 'descr'", path_);
        descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        TANDEM_CHECK(!have_fortran, "{}: .npy header repeats 'fortran_order'", path_);
        fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        TANDEM_CHECK(!have_shape, "{}: .npy header repeats 'shape'", path_);
        shape = tuple();
        have_shape = true;
      } else {
        core::fail("{}: .npy header has an unknown key '{}'", path_, key);
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      TANDEM_CHECK(peek() == '}', "{}: .npy header: expected ',' or '}}' at byte {}", path_, pos_);
    }
    expect('}');
    while (pos_ < text_.size()) {
      TANDEM_CHECK(text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\0',
                   "{}: .npy header: unexpected text after the dict at byte {}", path_, pos_);
      ++pos_;
    }
    TANDEM_CHECK(have_descr && have_fortran && have_shape, "{}: .npy header lacks {}", path_,
                 !have_descr     ? "'descr'"
                 : !have_fortran ? "'fortran_order'"
                                 : "'shape'");
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_space();
    TANDEM_CHECK(peek() == c, "{}: .npy header: expected '{}' at byte {}", path_, c, pos_);
    ++pos_;
  }
  std::string quoted() {
    const char q = peek();
    TANDEM_CHECK(q == '\'' || q == '"', "{}: .npy header: expected a quoted string at byte {}",
                 path_, pos_);
    const std::size_t end = text_.find(q, pos_ + 1);
    TANDEM_CHECK(end != std::string_view::npos, "{}: .npy header: unterminated string", path_);
    std::string out(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    core::fail("{}: .npy header: fortran_order must be True or False", path_);
  }
  std::vector<std::int64_t> tuple() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      std::int64_t d = -1;
      const char* begin = text_.data() + pos_;
      auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), d);
      TANDEM_CHECK(ec == std::errc() && d >= 0,
                   "{}: .npy header: shape entry at byte {} is not a non-negative integer that "
                   "fits 63 bits",
                   path_, pos_);
      pos_ += static_cast<std::size_t>(end - begin);
      dims.push_back(d);
      TANDEM_CHECK(dims.size() <= 32, "{}: .npy header: more than 32 dimensions", path_);
      skip_space();
      if (peek() == ',')
        ++pos_;
      else
        TANDEM_CHECK(peek() == ')', "{}: .npy header: expected ',' or ')' in the shape", path_);
    }
    expect(')');
    return dims;
  }

  std::string_view text_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

}  // namespace

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
  TANDEM_CHECK(header_len <= raw.size() - offset, "{}: truncated .npy header", path);

  NpyArray arr;
  arr.source = path;
  std::string descr;
  bool fortran = false;
  HeaderParser(std::string_view(raw).substr(offset, header_len), path)
      .parse(descr, fortran, arr.shape);
  if (descr == "<u1" || descr == "u1") descr = "|u1";
  bool found = false;
  for (const auto& i : kDtypes) {
    if (descr == i.descr) {
      arr.dtype = i.dtype;
      found = true;
    }
  }
  TANDEM_CHECK(found,
               "{}: unsupported .npy dtype '{}' (supported: little-endian f4 f8 i4 i8 u1 "
               "u2 u4 u8)",
               path, descr);
  TANDEM_CHECK(!fortran, "{}: only C-order .npy arrays are supported", path);
  // numel x item size must not overflow before it is compared with the data's size.
  const std::size_t data_bytes = raw.size() - offset - header_len;
  const bool empty = std::find(arr.shape.begin(), arr.shape.end(), 0) != arr.shape.end();
  std::uint64_t nbytes = empty ? 0 : arr.item_size();
  for (std::int64_t d : arr.shape) {
    if (empty) break;
    const auto du = static_cast<std::uint64_t>(d);
    TANDEM_CHECK(nbytes <= data_bytes / du,
                 "{}: shape ({}) needs more bytes than the file's {} of data", path,
                 fmt::join(arr.shape, ", "), data_bytes);
    nbytes *= du;
  }
  TANDEM_CHECK(data_bytes == nbytes, "{}: data is {} bytes, shape ({}) and dtype {} need {}", path,
               data_bytes, fmt::join(arr.shape, ", "), descr, nbytes);
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
