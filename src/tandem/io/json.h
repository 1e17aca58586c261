// Strict JSON for the files tandem reads. Two things nlohmann accepts are errors here: a key
// repeated within one object (nlohmann keeps the last one silently) and nesting deeper than a
// bound (no file tandem reads nests beyond a handful of levels, and nlohmann's recursive dump()
// of a deeply nested value, e.g. in an error message, would overflow the stack).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace tandem::io {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; errors are tandem::Error prefixed with `where` (a file name, or file:line).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          int max_depth = kMaxJsonDepth);
// Reads and parses a whole file; errors name the path.
nlohmann::json read_json_file(const std::string& path);

// The value of `key` in object `j` as T; an Error naming `where` and the key when it is missing
// or of another type (instead of nlohmann's "type must be number, but is string").
// Integers must be integers in T's range (nlohmann would wrap -1 or 2^32 into a uint32_t and
// truncate 1.5), floats any number, strings strings, bools bools.
template <typename T>
T json_field(const nlohmann::json& j, const char* key, const std::string& where);

// `value` as T under the same rules; `what` names it in the error ("file: key 'x'").
template <typename T>
T json_as(const nlohmann::json& value, const std::string& what);

// A short rendering of a value for error messages (at most `limit` characters).
std::string json_excerpt(const nlohmann::json& value, std::size_t limit = 80);

namespace json_detail {
[[noreturn]] void wrong_type(const nlohmann::json& value, const std::string& what,
                             const char* expected);
[[noreturn]] void missing(const std::string& where, const char* key);
}  // namespace json_detail

template <typename T>
T json_as(const nlohmann::json& value, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (value.is_boolean()) return value.get<bool>();
    json_detail::wrong_type(value, what, "true or false");
  } else if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      const auto v = value.get<std::uint64_t>();
      if (v <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
    } else if (value.is_number_integer()) {
      const auto v = value.get<std::int64_t>();
      if constexpr (std::is_signed_v<T>) {
        if (v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max())
          return static_cast<T>(v);
      } else if (v >= 0 && static_cast<std::uint64_t>(v) <= std::numeric_limits<T>::max()) {
        return static_cast<T>(v);
      }
    }
    json_detail::wrong_type(
        value, what,
        std::is_signed_v<T> ? "an integer in range" : "a non-negative integer in range");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (value.is_number()) return value.get<T>();
    json_detail::wrong_type(value, what, "a number");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (value.is_string()) return value.get<std::string>();
    json_detail::wrong_type(value, what, "a string");
  } else {
    static_assert(std::is_same_v<T, nlohmann::json>, "json_as: unsupported type");
    return value;
  }
}

template <typename T>
T json_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const std::string what = where + ": field '" + key + "'";
  if (!j.is_object()) json_detail::wrong_type(j, where, "an object");
  auto it = j.find(key);
  if (it == j.end()) json_detail::missing(where, key);
  return json_as<T>(*it, what);
}

}  // namespace tandem::io
