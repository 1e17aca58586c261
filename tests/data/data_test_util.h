// Helpers shared by the data tests: fixture paths, temporary directories and small configs.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/data/data_config.h"
#include "tandem/io/config.h"

namespace tandem::data::testing {

inline std::string fixture(const std::string& name) {
  return std::string(TANDEM_FIXTURES_DIR) + "/data/" + name;
}

inline nlohmann::json read_json_fixture(const std::string& name) {
  return nlohmann::json::parse(core::read_file(fixture(name)));
}

// A fresh, empty directory under the system temp dir.
inline std::string temp_dir(const std::string& name) {
  return tandem::testing::temp_dir("data_" + name);
}

inline void write_text(const std::string& path, const std::string& text) {
  tandem::testing::write_text(path, text);
}

template <typename T>
void write_tokens(const std::string& path, const std::vector<T>& tokens) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * sizeof(T)));
}

inline DataConfig parse_yaml(const std::string& yaml, const std::string& base_dir = "") {
  YAML::Node root = YAML::Load(yaml);
  return parse_data_config(io::ConfigSection(root["data"], "data", "test.yaml"), base_dir);
}

// The data config matching one of the OLMo-core loader fixtures (loader_a.json, loader_b.json,
// loader_mix.json).
inline std::string fixture_config_yaml(const nlohmann::json& fx, const std::string& set,
                                       std::int64_t seed) {
  std::string yaml = "data:\n";
  if (fx.contains("manifest")) {
    // loader_mix.json: the files come from an OLMo-core data-mix manifest.
    yaml += "  mix: \"" + fixture(fx["manifest"].get<std::string>()) + "\"\n";
    yaml += "  mix_base_dir: \"" + fixture(fx["mix_base_dir"].get<std::string>()) + "\"\n";
    yaml += "  mix_tokenizer_id: " + fx["mix_tokenizer_id"].get<std::string>() + "\n";
  } else {
    std::string paths;
    for (const auto& f : fx["files"])
      paths += "\"" + fixture("tokens_" + set + "/" + f.get<std::string>()) + "\", ";
    yaml += "  paths: [" + paths + "]\n";
  }
  yaml += "  sequence_length: " + std::to_string(fx["sequence_length"].get<int>()) + "\n";
  yaml += "  global_batch_size: " + std::to_string(fx["global_batch_size"].get<int>()) + "\n";
  yaml += "  seed: " + std::to_string(seed) + "\n";
  yaml += "  vocab_size: " + std::to_string(fx["vocab_size"].get<int>()) + "\n";
  yaml += "  dtype: " + fx["dtype"].get<std::string>() + "\n";
  yaml += "  eos_token_id: " + std::to_string(fx["eos_token_id"].get<int>()) + "\n";
  yaml += "  pad_token_id: " + std::to_string(fx["pad_token_id"].get<int>()) + "\n";
  if (!fx["max_target_sequence_length"].is_null())
    yaml += "  max_target_sequence_length: " +
            std::to_string(fx["max_target_sequence_length"].get<int>()) + "\n";
  if (fx["instance_filter"].get<bool>()) yaml += "  instance_filter_config: {}\n";
  return yaml;
}

}  // namespace tandem::data::testing
