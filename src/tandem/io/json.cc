#include "tandem/io/json.h"

#include <set>
#include <vector>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::io {

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth) {
  // One set of keys per open object; a repeated key is an error instead of "last one wins".
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event,
                      nlohmann::json& parsed) -> bool {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      // Stops the parse before the nesting gets deep (depth counts the enclosing containers).
      if (depth >= max_depth)
        core::fail("{}: invalid JSON: nested more than {} levels deep", where, max_depth);
      if (event == Event::object_start) open_objects.emplace_back();
    } else if (event == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json result;
  try {
    result = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid JSON: {}", where, e.what());
  }
  if (!duplicate.empty())
    core::fail("{}: invalid JSON: key '{}' appears twice in one object", where, duplicate);
  return result;
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json(core::read_file(path), path);
}

std::string json_excerpt(const nlohmann::json& value, std::size_t limit) {
  // Values from parse_json nest at most kMaxJsonDepth levels, so dump() is safe.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

namespace json_detail {

void wrong_type(const nlohmann::json& value, const std::string& what, const char* expected) {
  core::fail("{} must be {}, got {}", what, expected, json_excerpt(value));
}

void missing(const std::string& where, const char* key) {
  core::fail("{}: missing field '{}'", where, key);
}

}  // namespace json_detail

}  // namespace tandem::io
