// Helpers shared by the data tests: fixture paths, temporary directories and small configs.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/hash.h"
#include "tandem/data/data_config.h"
#include "tandem/data/loader.h"
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

// sha256 of a batch's int64 input ids, row after row (the OLMo-core fixtures' tokens_sha256).
inline std::string batch_tokens_sha256(const Batch& b) {
  return core::sha256_hex(std::span<const std::uint8_t>(
      reinterpret_cast<const std::uint8_t*>(b.input_ids.data()), b.input_ids.size() * 8));
}

// The loader's next batches on `rank` of `world` against OLMo-core's: [{ids, tokens_sha256,
// mask (with the repetition filter)}].
inline void expect_olmo_core_batches(Loader& loader, std::uint64_t rank, std::uint64_t world,
                                     const nlohmann::json& want, const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    Batch b = loader.next_batch(rank, world);
    const std::string where =
        what + " rank " + std::to_string(rank) + " batch " + std::to_string(i);
    ASSERT_EQ(b.instance_ids, want[i]["ids"].get<std::vector<std::uint64_t>>()) << where;
    EXPECT_EQ(batch_tokens_sha256(b), want[i]["tokens_sha256"].get<std::string>()) << where;
    if (want[i].contains("mask")) {
      auto mask = want[i]["mask"].get<std::vector<bool>>();
      for (std::size_t k = 0; k < mask.size(); ++k)
        EXPECT_EQ(b.instance_mask[k] != 0, mask[k]) << where << " instance " << k;
    }
  }
}

// One run of OLMo-core's loader from a fixture ({world_size, epoch, global_indices, ranks}):
// every rank's loader at that epoch has OLMo-core's global order and hands out its batches.
inline void expect_olmo_core_run(const DataConfig& config,
                                 const std::shared_ptr<const TokenDataset>& dataset,
                                 const nlohmann::json& run, const std::string& what) {
  const std::uint64_t world = run["world_size"], epoch = run["epoch"];
  for (std::uint64_t rank = 0; rank < world; ++rank) {
    Loader loader(config, dataset);
    LoaderState s = loader.state();
    s.epoch = epoch;
    loader.restore(s);
    auto order = loader.plan(epoch)->global_order();
    ASSERT_EQ(std::vector<std::uint32_t>(order.begin(), order.end()),
              run["global_indices"].get<std::vector<std::uint32_t>>())
        << what;
    const auto& batches = run["ranks"][rank];
    ASSERT_EQ(batches.size(), loader.batches_per_epoch()) << what;
    expect_olmo_core_batches(loader, rank, world, batches, what);
  }
}

}  // namespace tandem::data::testing
