// Our Loader against OLMo-core's NumpyFSLDataset/NumpyFSLDataLoader on three token-file sets
// (loader_a.json: uint16, 5 files, tail dropped; loader_b.json: uint32, chunked by
// max_target_sequence_length, repetition filter on; loader_mix.json: the files of an OLMo-core
// data-mix manifest, chunked, filter on): fingerprint, global indices, per-rank instance ids,
// tokens and instance masks for world sizes 1/2/4, two epochs (two seeds for a and b), and a
// resume from an OLMo-core state on another world size.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "tandem/data/loader.h"

namespace tandem::data {
namespace {

class OlmoLoaderParity : public ::testing::TestWithParam<std::string> {};

TEST_P(OlmoLoaderParity, SameOrderTokensAndMasksAsOlmoCore) {
  const std::string set = GetParam();
  auto fx = testing::read_json_fixture("loader_" + set + ".json");
  std::size_t runs = 0;
  for (const auto& run : fx["runs"]) {
    std::int64_t seed = run["seed"];
    std::uint64_t world = run["world_size"], epoch = run["epoch"];
    DataConfig config = testing::parse_yaml(testing::fixture_config_yaml(fx, set, seed));
    auto dataset = std::make_shared<const TokenDataset>(config);
    ASSERT_EQ(dataset->num_instances(), fx["num_instances"].get<std::uint64_t>());
    ASSERT_EQ(dataset->fingerprint(), fx["fingerprint"].get<std::string>());
    std::string what = "set " + set + " seed " + std::to_string(seed) + " world " +
                       std::to_string(world) + " epoch " + std::to_string(epoch);
    testing::expect_olmo_core_run(config, dataset, run, what);
    ++runs;
  }
  EXPECT_GE(runs, set == "mix" ? 6u : 12u);
}

TEST_P(OlmoLoaderParity, ResumesFromAnOlmoCoreStateOnAnotherWorldSize) {
  const std::string set = GetParam();
  auto fx = testing::read_json_fixture("loader_" + set + ".json");
  ASSERT_FALSE(fx["resumes"].empty());
  for (const auto& rs : fx["resumes"]) {
    DataConfig config = testing::parse_yaml(testing::fixture_config_yaml(fx, set, rs["seed"]));
    LoaderState saved = LoaderState::from_json(rs["state"], "OLMo-core state_dict");
    std::uint64_t world = rs["after_world_size"];
    for (std::uint64_t rank = 0; rank < world; ++rank) {
      Loader loader(config);
      loader.restore(saved);
      EXPECT_EQ(loader.state().batches_processed, rs["batches_before"].get<std::uint64_t>());
      testing::expect_olmo_core_batches(loader, rank, world, rs["ranks"][rank],
                                        "resume set " + set);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TokenSets, OlmoLoaderParity, ::testing::Values("a", "b", "mix"),
                         tandem::testing::ParamName());

}  // namespace
}  // namespace tandem::data
