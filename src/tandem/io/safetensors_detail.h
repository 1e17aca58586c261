// Internals shared by the safetensors reader, writer and checkpoint code (not a public API).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/io/safetensors.h"

namespace tandem::io::safetensors_detail {

// Largest header the reader accepts (the Rust safetensors library uses the same bound).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// One dtype of the safetensors format: its spelling, its width in bits (F4/F6 are sub-byte) and,
// when tandem can convert it to floats, the matching DType.
struct DTypeSpec {
  std::string_view name;
  int bits;
  std::optional<DType> dtype;
};

// nullptr for a spelling the format does not define.
const DTypeSpec* find_dtype(std::string_view name);

// parse_json (io/json.h): a key repeated within one object or nesting beyond a bound is an
// error. Errors are tandem::core::Error prefixed with `where` (a file name).
nlohmann::json parse_json_strict(std::string_view text, const std::string& where);

// Converts `count` elements of `dtype` at `src` (any alignment) to fp32.
void convert_to_f32(DType dtype, const std::uint8_t* src, std::size_t count, float* out);

}  // namespace tandem::io::safetensors_detail
