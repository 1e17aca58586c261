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
  std::optional<std::int64_t> get_optional_int(const std::string& key);  // absent or null -> none
  ConfigSection section(const std::string& key);  // nested mapping; error if not a mapping
  YAML::Node raw(const std::string& key);         // marks the key used
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

}  // namespace tandem::io
