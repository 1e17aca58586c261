// Sharded model weights (model/weight_shards.h): shards written by several ranks, indexed,
// read back in any other split or whole (read_model_weights), and clear errors naming the file
// for a missing shard, a gap or overlap between shards, a damaged index.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "../support/test_support.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/model/model_io.h"
#include "tandem/model/weight_shards.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

model::ModelConfig small_config() {
  return model::load_model_config(
      std::string(TANDEM_SOURCE_DIR) + "/configs/models/olmo3-tiny.yaml",
      {"model.vocab_size=301", "model.pad_vocab_to_multiple_of=1", "model.n_layers=2",
       "model.hidden_size=97"});
}

// Slices of `flat` cutting every parameter into `parts` runs, run k of each going to shard k.
std::vector<std::vector<model::WeightSlice>> split(const model::ParameterLayout& layout,
                                                   std::vector<float>& flat, int parts) {
  std::vector<std::vector<model::WeightSlice>> out(static_cast<std::size_t>(parts));
  for (const model::ParameterEntry& e : layout.entries())
    for (int k = 0; k < parts; ++k) {
      const std::int64_t lo = e.numel * k / parts, hi = e.numel * (k + 1) / parts;
      if (lo < hi)
        out[static_cast<std::size_t>(k)].push_back(
            {e.name, e.shape, lo,
             std::span<float>(flat.data() + e.offset + lo, static_cast<std::size_t>(hi - lo))});
    }
  return out;
}

struct ShardedDir {
  std::string dir;
  model::ModelConfig config;
  std::vector<float> flat;
};

ShardedDir write_sharded(const std::string& name, int shards) {
  ShardedDir d{testing::temp_dir(name), small_config(), {}};
  const model::ParameterLayout layout(d.config);
  d.flat.assign(static_cast<std::size_t>(layout.total()), 0.0f);
  for (const model::ParameterEntry& e : layout.entries())
    for (std::int64_t i = 0; i < e.numel; ++i)
      d.flat[static_cast<std::size_t>(e.offset + i)] = static_cast<float>(e.offset + i) * 0.5f;
  model::save_tandem_model_config(d.dir, d.config);
  auto parts = split(layout, d.flat, shards);
  for (int s = 0; s < shards; ++s)
    model::write_weight_shard(d.dir, s, shards, parts[static_cast<std::size_t>(s)]);
  model::write_weight_index(d.dir, shards, layout);
  return d;
}

std::string shard_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(WeightShards, ReadBackInAnotherSplitAndWhole) {
  const ShardedDir d = write_sharded("weight_shards_roundtrip", 3);
  EXPECT_TRUE(model::is_sharded_model_dir(d.dir));
  const model::ParameterLayout layout(d.config);
  // Another split (as FSDP at another world size would ask).
  std::vector<float> got(d.flat.size(), -1.0f);
  for (auto& part : split(layout, got, 4)) model::read_weight_ranges(d.dir, part);
  for (const model::ParameterEntry& e : layout.entries())
    for (std::int64_t i = 0; i < e.numel; ++i)
      ASSERT_EQ(got[static_cast<std::size_t>(e.offset + i)],
                d.flat[static_cast<std::size_t>(e.offset + i)])
          << e.name << " " << i;
  // Whole, as export, convert and eval read a model directory.
  const model::ModelWeights w = model::read_model_weights(d.dir);
  EXPECT_EQ(w.flat, d.flat);
  // And ranges of a whole model directory.
  const std::string whole = testing::temp_dir("weight_shards_whole");
  model::save_tandem_model(whole, d.config, d.flat);
  std::vector<float> again(d.flat.size(), -1.0f);
  for (auto& part : split(layout, again, 2)) model::read_weight_ranges(whole, part);
  EXPECT_EQ(again, d.flat);
}

TEST(WeightShards, ErrorsNameTheFile) {
  {
    // A shard missing when the index is written.
    ShardedDir d = write_sharded("weight_shards_missing_at_index", 2);
    fs::remove(d.dir + "/shard-00001-of-00002.safetensors");
    const std::string e = shard_error_of(
        [&] { model::write_weight_index(d.dir, 2, model::ParameterLayout(d.config)); });
    EXPECT_NE(e.find("shard-00001-of-00002.safetensors"), std::string::npos) << e;
  }
  {
    // A shard missing when read: named by the index.
    ShardedDir d = write_sharded("weight_shards_missing_at_read", 2);
    fs::remove(d.dir + "/shard-00000-of-00002.safetensors");
    const std::string e = shard_error_of([&] { model::read_model_weights(d.dir); });
    EXPECT_NE(e.find("shard-00000-of-00002.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("missing"), std::string::npos) << e;
  }
  {
    // Shards that do not tile a parameter (one shard written twice: an overlap).
    ShardedDir d{testing::temp_dir("weight_shards_overlap"), small_config(), {}};
    const model::ParameterLayout layout(d.config);
    d.flat.assign(static_cast<std::size_t>(layout.total()), 1.0f);
    auto parts = split(layout, d.flat, 2);
    model::write_weight_shard(d.dir, 0, 2, parts[0]);
    model::write_weight_shard(d.dir, 1, 2, parts[0]);
    const std::string e = shard_error_of([&] { model::write_weight_index(d.dir, 2, layout); });
    EXPECT_NE(e.find("overlap"), std::string::npos) << e;
    EXPECT_NE(e.find(d.dir), std::string::npos) << e;
  }
  {
    // A damaged index: a gap, then a piece naming a file outside the directory.
    ShardedDir d = write_sharded("weight_shards_bad_index", 2);
    const std::string index = d.dir + "/shards.json";
    nlohmann::json j = nlohmann::json::parse(core::read_file(index));
    j["tensors"]["embeddings.weight"]["pieces"][1]["start"] = 5;
    core::write_file_atomic(index, j.dump());
    std::string e = shard_error_of([&] { model::read_model_weights(d.dir); });
    EXPECT_NE(e.find("shards.json"), std::string::npos) << e;
    EXPECT_NE(e.find("embeddings.weight"), std::string::npos) << e;
    j = nlohmann::json::parse(core::read_file(d.dir + "/shards.json"));
    j["tensors"]["embeddings.weight"]["pieces"][1]["start"] =
        j["tensors"]["embeddings.weight"]["pieces"][0]["length"];
    j["tensors"]["embeddings.weight"]["pieces"][0]["file"] = "../elsewhere.safetensors";
    core::write_file_atomic(index, j.dump());
    e = shard_error_of([&] { model::read_model_weights(d.dir); });
    EXPECT_NE(e.find("not a plain file name"), std::string::npos) << e;
  }
  {
    // No index and no whole weights.
    const std::string empty = testing::temp_dir("weight_shards_none");
    std::vector<float> v(4);
    std::vector<model::WeightSlice> s{{"embeddings.weight", {301, 64}, 0, std::span<float>(v)}};
    const std::string e = shard_error_of([&] { model::read_weight_ranges(empty, s); });
    EXPECT_NE(e.find(empty), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace tandem
