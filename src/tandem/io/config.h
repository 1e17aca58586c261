// YAML configs with `key=value` overrides and strict reading: every key must be consumed by
// someone, so an unknown key or a wrong type is an error that names the key (and the file).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tandem::io {

// Loads a YAML file strictly: errors name the file and line for invalid YAML, a key repeated in
// one mapping (yaml-cpp would silently let the first one win), a key that is not a plain
// scalar, and documents too large to be a config (e.g. exponential alias expansion).
YAML::Node load_yaml_file(const std::string& path);
// The same checks for a node parsed from other text (an override value); `where` names it.
void check_yaml_document(const YAML::Node& root, const std::string& where);

// `node` converted to T, or an Error "`where`: expected `type_name`, got '...'" (instead of
// yaml-cpp's "bad conversion" without a key or file).
template <typename T>
T yaml_as(const YAML::Node& node, const std::string& where, const char* type_name);

// Loads `path` and applies overrides of the form "a.b.c=value" (value parsed as YAML, so
// "x=3", "x=[1,2]" and "x=abc" all work). Throws Error naming the file or the override.
YAML::Node load_yaml_config(const std::string& path,
                            const std::vector<std::string>& overrides = {});
void apply_override(YAML::Node& root, const std::string& override_text);
// A path from a config file: relative ones are relative to the config's directory `base_dir`
// (empty paths, absolute paths and an empty base_dir are returned unchanged).
std::string resolve_config_path(const std::string& base_dir, const std::string& path);

// A view of one mapping in the config. Reads record which keys were used; finish() throws if any
// key was not read (a typo such as "d_modle" is caught instead of silently ignored).
[[noreturn]] void throw_config_error(const std::string& where, const char* type_name,
                                     const std::string& shown);

class ConfigSection {
 public:
  ConfigSection(YAML::Node node, std::string path, std::string source = "");

  bool has(const std::string& key) const;
  std::int64_t get_int(const std::string& key);
  std::int64_t get_int(const std::string& key, std::int64_t fallback);
  double get_double(const std::string& key);
  double get_double(const std::string& key, double fallback);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key);
  std::string get_string(const std::string& key, const std::string& fallback);
  std::vector<std::string> get_string_list(const std::string& key);
  std::vector<std::int64_t> get_int_list(const std::string& key);
  std::vector<double> get_double_list(const std::string& key);
  std::optional<std::int64_t> get_optional_int(const std::string& key);  // absent or null -> none
  ConfigSection section(const std::string& key);  // nested mapping; error if not a mapping
  // A required list of mappings, each a section named `key[i]` in messages.
  std::vector<ConfigSection> section_list(const std::string& key);
  YAML::Node raw(const std::string& key);  // marks the key used
  void mark_used(const std::string& key);
  void finish() const;  // error naming every unknown key

  const std::string& path() const { return path_; }
  std::string where(const std::string& key) const;  // "file: key a.b.c"

 private:
  YAML::Node require(const std::string& key);
  YAML::Node node_;
  std::string path_;
  std::string source_;
  std::set<std::string> used_;
};

template <typename T>
T yaml_as(const YAML::Node& node, const std::string& where, const char* type_name) {
  try {
    if (!node.IsScalar()) throw YAML::BadConversion(node.Mark());
    return node.as<T>();
  } catch (const YAML::Exception&) {
    std::string shown = node.IsDefined() ? YAML::Dump(node) : "nothing";
    if (shown.size() > 80) shown = shown.substr(0, 80) + "...";
    throw_config_error(where, type_name, shown);
  }
}

}  // namespace tandem::io
