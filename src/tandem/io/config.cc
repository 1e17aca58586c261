#include "tandem/io/config.h"

#include <filesystem>
#include <map>

#include "tandem/core/atomic_file.h"

#include "tandem/core/error.h"

namespace tandem::io {
namespace {

template <typename T>
T convert_or_fail(const YAML::Node& node, const std::string& where, const char* type_name) {
  return yaml_as<T>(node, where, type_name);
}

// A config holds a few hundred nodes; aliases can make a small file expand exponentially.
constexpr std::size_t kMaxYamlNodes = 1'000'000;
constexpr int kMaxYamlDepth = 256;

void check_node(const YAML::Node& node, const std::string& where, int depth, std::size_t& visited) {
  TANDEM_CHECK(++visited <= kMaxYamlNodes,
               "{}: more than {} YAML nodes (aliases expanding without bound?)", where,
               kMaxYamlNodes);
  TANDEM_CHECK(depth <= kMaxYamlDepth, "{}: line {}: nested more than {} levels deep", where,
               node.Mark().line + 1, kMaxYamlDepth);
  if (node.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      const int line = kv.first.Mark().line + 1;
      TANDEM_CHECK(kv.first.IsScalar(), "{}: line {}: a mapping key must be a plain name, not {}",
                   where, line, kv.first.IsSequence() ? "a list" : "a mapping");
      const std::string& key = kv.first.Scalar();
      auto [it, inserted] = first_line.emplace(key, line);
      TANDEM_CHECK(inserted,
                   "{}: line {}: key '{}' appears twice in one mapping (first at line {})", where,
                   line, key, it->second);
      check_node(kv.second, where, depth + 1, visited);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_node(item, where, depth + 1, visited);
  }
}

}  // namespace

void throw_config_error(const std::string& where, const char* type_name, const std::string& shown) {
  core::fail("{}: expected {}, got '{}'", where, type_name, shown);
}

void check_yaml_document(const YAML::Node& root, const std::string& where) {
  std::size_t visited = 0;
  check_node(root, where, 0, visited);
}

YAML::Node load_yaml_file(const std::string& path) {
  // read_file names a missing file or a directory; yaml-cpp only says "bad file".
  const std::string text = core::read_file(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    core::fail("{}: invalid YAML: {}", path, e.what());
  }
  check_yaml_document(root, path);
  return root;
}

YAML::Node load_yaml_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = load_yaml_file(path);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  TANDEM_CHECK(root.IsMap(), "{}: the top level must be a mapping", path);
  for (const auto& o : overrides) apply_override(root, o);
  return root;
}

void apply_override(YAML::Node& root, const std::string& text) {
  auto eq = text.find('=');
  TANDEM_CHECK(eq != std::string::npos && eq > 0, "override '{}' is not of the form key=value",
               text);
  std::string key = text.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    core::fail("override '{}': value is not valid YAML: {}", text, e.what());
  }
  check_yaml_document(value, "override '" + text + "'");
  // Walk a.b.c, creating mappings as needed. yaml-cpp nodes are handles, so reassigning
  // `node` must go through a fresh copy rather than operator= (which would overwrite).
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node parent = chain.back();
    TANDEM_CHECK(!parts[i].empty(), "override '{}': empty key component", text);
    if (!parent[parts[i]] || parent[parts[i]].IsNull())
      parent[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node child = parent[parts[i]];
    TANDEM_CHECK(child.IsMap(), "override '{}': '{}' is not a mapping", text, parts[i]);
    chain.push_back(child);
  }
  YAML::Node parent = chain.back();
  parent[parts.back()] = value;
}

ConfigSection::ConfigSection(YAML::Node node, std::string path, std::string source)
    : node_(std::move(node)), path_(std::move(path)), source_(std::move(source)) {
  if (!node_.IsDefined() || node_.IsNull()) node_ = YAML::Node(YAML::NodeType::Map);
  TANDEM_CHECK(node_.IsMap(), "{}: expected a mapping", where(""));
}

std::string ConfigSection::where(const std::string& key) const {
  std::string full = path_.empty() ? key : (key.empty() ? path_ : path_ + "." + key);
  return source_.empty() ? "config key '" + full + "'" : source_ + ": key '" + full + "'";
}

bool ConfigSection::has(const std::string& key) const {
  return node_[key].IsDefined() && !node_[key].IsNull();
}

YAML::Node ConfigSection::require(const std::string& key) {
  used_.insert(key);
  TANDEM_CHECK(has(key), "{} is required", where(key));
  return node_[key];
}

void ConfigSection::mark_used(const std::string& key) { used_.insert(key); }

YAML::Node ConfigSection::raw(const std::string& key) {
  used_.insert(key);
  return node_[key];
}

std::int64_t ConfigSection::get_int(const std::string& key) {
  return convert_or_fail<std::int64_t>(require(key), where(key), "an integer");
}
std::int64_t ConfigSection::get_int(const std::string& key, std::int64_t fallback) {
  used_.insert(key);
  return has(key) ? get_int(key) : fallback;
}
double ConfigSection::get_double(const std::string& key) {
  return convert_or_fail<double>(require(key), where(key), "a number");
}
double ConfigSection::get_double(const std::string& key, double fallback) {
  used_.insert(key);
  return has(key) ? get_double(key) : fallback;
}
bool ConfigSection::get_bool(const std::string& key, bool fallback) {
  used_.insert(key);
  return has(key) ? convert_or_fail<bool>(node_[key], where(key), "true or false") : fallback;
}
std::string ConfigSection::get_string(const std::string& key) {
  YAML::Node n = require(key);
  TANDEM_CHECK(n.IsScalar(), "{}: expected a string", where(key));
  return n.Scalar();
}
std::string ConfigSection::get_string(const std::string& key, const std::string& fallback) {
  used_.insert(key);
  return has(key) ? get_string(key) : fallback;
}
std::vector<std::string> ConfigSection::get_string_list(const std::string& key) {
  YAML::Node n = require(key);
  if (n.IsScalar()) return {n.Scalar()};
  TANDEM_CHECK(n.IsSequence(), "{}: expected a list of strings", where(key));
  std::vector<std::string> out;
  for (const auto& item : n) {
    TANDEM_CHECK(item.IsScalar(), "{}: expected a list of strings", where(key));
    out.push_back(item.Scalar());
  }
  return out;
}
std::vector<std::int64_t> ConfigSection::get_int_list(const std::string& key) {
  YAML::Node n = require(key);
  TANDEM_CHECK(n.IsSequence(), "{}: expected a list of integers", where(key));
  std::vector<std::int64_t> out;
  for (const auto& item : n)
    out.push_back(convert_or_fail<std::int64_t>(item, where(key), "an integer"));
  return out;
}
std::vector<double> ConfigSection::get_double_list(const std::string& key) {
  YAML::Node n = require(key);
  TANDEM_CHECK(n.IsSequence(), "{}: expected a list of numbers", where(key));
  std::vector<double> out;
  for (const auto& item : n) out.push_back(convert_or_fail<double>(item, where(key), "a number"));
  return out;
}
std::optional<std::int64_t> ConfigSection::get_optional_int(const std::string& key) {
  used_.insert(key);
  if (!has(key)) return std::nullopt;
  return get_int(key);
}
ConfigSection ConfigSection::section(const std::string& key) {
  used_.insert(key);
  YAML::Node n = node_[key];
  TANDEM_CHECK(!n.IsDefined() || n.IsNull() || n.IsMap(), "{}: expected a mapping", where(key));
  return ConfigSection(n, path_.empty() ? key : path_ + "." + key, source_);
}

std::vector<ConfigSection> ConfigSection::section_list(const std::string& key) {
  YAML::Node n = require(key);
  TANDEM_CHECK(n.IsSequence(), "{}: expected a list of mappings", where(key));
  std::vector<ConfigSection> out;
  const std::string base = path_.empty() ? key : path_ + "." + key;
  for (std::size_t i = 0; i < n.size(); ++i) {
    TANDEM_CHECK(n[i].IsMap(), "{}: item {} is not a mapping", where(key), i);
    out.emplace_back(n[i], base + "[" + std::to_string(i) + "]", source_);
  }
  return out;
}

void ConfigSection::finish() const {
  std::string unknown;
  for (const auto& kv : node_) {
    std::string k = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
    if (!used_.count(k)) unknown += (unknown.empty() ? "" : ", ") + where(k);
  }
  TANDEM_CHECK(unknown.empty(), "unknown config key(s): {}", unknown);
}

std::string resolve_config_path(const std::string& base_dir, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || base_dir.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

}  // namespace tandem::io
