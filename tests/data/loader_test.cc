// Loader behaviour: several simulated workers, labels and masks, micro-batches, prefetch,
// state round trips and resume on other world sizes, epoch rollover.
#include <gtest/gtest.h>

#include <set>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/loader.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem::data {
namespace {

DataConfig set_a_config(std::int64_t seed = 34521) {
  auto fx = testing::read_json_fixture("loader_a.json");
  return testing::parse_yaml(testing::fixture_config_yaml(fx, "a", seed));
}

TEST(Loader, WorkersSplitEachGlobalBatchDisjointlyAndCoverIt) {
  DataConfig config = set_a_config();
  auto ds = std::make_shared<const TokenDataset>(config);
  for (std::uint64_t world : {1u, 2u, 4u, 8u}) {
    std::vector<std::unique_ptr<Loader>> ranks;
    for (std::uint64_t r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(config, ds));
    std::set<std::uint64_t> epoch_seen;
    auto plan = ranks[0]->plan(1);
    for (std::uint64_t step = 0; step < ranks[0]->batches_per_epoch(); ++step) {
      std::vector<std::uint64_t> assembled(plan->instances_per_batch());
      for (std::uint64_t r = 0; r < world; ++r) {
        Batch b = ranks[r]->next_batch(r, world);
        ASSERT_EQ(b.num_instances(), plan->instances_per_batch() / world);
        for (std::size_t i = 0; i < b.num_instances(); ++i) {
          assembled[r + i * world] = b.instance_ids[i];
          EXPECT_TRUE(epoch_seen.insert(b.instance_ids[i]).second) << "repeat";
        }
      }
      auto row = plan->global_batch(step);
      EXPECT_TRUE(std::equal(row.begin(), row.end(), assembled.begin())) << "world " << world;
    }
    EXPECT_EQ(epoch_seen.size(), ranks[0]->batches_per_epoch() * plan->instances_per_batch());
  }
}

// The loader marks rejected instances; the training step's labels (optim::make_labels, the one
// home of labels) then ignore every position of them.
TEST(Loader, RejectedInstancesAreMaskedAndTheirLabelsIgnored) {
  auto fx = testing::read_json_fixture("loader_b.json");
  DataConfig config = testing::parse_yaml(testing::fixture_config_yaml(fx, "b", 34521));
  Loader loader(config);
  std::size_t rejected = 0, kept = 0;
  for (std::uint64_t s = 0; s < loader.batches_per_epoch(); ++s) {
    Batch b = loader.next_batch(0, 1);
    const std::size_t seq = static_cast<std::size_t>(b.sequence_length);
    for (std::size_t i = 0; i < b.num_instances(); ++i) {
      const std::int64_t* ids = b.input_ids.data() + i * seq;
      const std::vector<std::int64_t> labels =
          optim::make_labels(ids, 1, b.sequence_length, b.instance_mask.data() + i);
      if (b.instance_mask[i]) {
        ++kept;
        for (std::size_t t = 0; t + 1 < seq; ++t) ASSERT_EQ(labels[t], ids[t + 1]);
        ASSERT_EQ(labels[seq - 1], core::kIgnoreIndex);
      } else {
        ++rejected;
        for (std::size_t t = 0; t < seq; ++t) ASSERT_EQ(labels[t], core::kIgnoreIndex);
        // Tokens are kept: a rejected instance is a long repeat, not padding.
        ASSERT_NE(ids[0], config.pad_token_id);
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(kept, rejected);
}

TEST(Loader, PrefetchGivesTheSameBatchesAsOnDemand) {
  DataConfig config = set_a_config();
  config.prefetch_batches = 3;
  Loader ahead(config);
  Loader direct(config, std::make_shared<TokenDataset>(config), LoaderOptions{true, false});
  for (int s = 0; s < 70; ++s) {  // crosses into epoch 3
    Batch a = ahead.next_batch(1, 4), d = direct.next_batch(1, 4);
    ASSERT_EQ(a.instance_ids, d.instance_ids) << s;
    ASSERT_EQ(a.input_ids, d.input_ids) << s;
    ASSERT_EQ(a.epoch, d.epoch);
  }
  EXPECT_EQ(ahead.state().to_json(), direct.state().to_json());
}

TEST(Loader, StateRoundTripsAndResumesOnAnyDividingWorldSize) {
  DataConfig config = set_a_config();
  auto ds = std::make_shared<const TokenDataset>(config);
  Loader reference(config, ds);
  std::vector<std::vector<std::uint64_t>> global;
  for (int s = 0; s < 40; ++s) global.push_back(reference.next_batch(0, 1).instance_ids);

  for (std::uint64_t before : {1u, 2u, 4u})
    for (std::uint64_t after : {1u, 2u, 4u, 8u}) {
      std::vector<std::unique_ptr<Loader>> first;
      for (std::uint64_t r = 0; r < before; ++r)
        first.push_back(std::make_unique<Loader>(config, ds));
      for (int s = 0; s < 7; ++s)
        for (std::uint64_t r = 0; r < before; ++r) first[r]->next_batch(r, before);
      std::string dir = testing::temp_dir("state");
      first[0]->state().write(dir + "/state.json");
      LoaderState saved = LoaderState::read(dir + "/state.json");
      EXPECT_EQ(saved.batches_processed, 7u);
      EXPECT_EQ(saved.tokens_processed, 7u * config.global_batch_size);
      for (int s = 7; s < 40; ++s) {
        std::vector<std::uint64_t> assembled(global[s].size());
        for (std::uint64_t r = 0; r < after; ++r) {
          Loader l(config, ds);
          l.restore(saved);
          for (int k = 7; k < s; ++k) l.next_batch(r, after);
          Batch b = l.next_batch(r, after);
          for (std::size_t i = 0; i < b.num_instances(); ++i)
            assembled[r + i * after] = b.instance_ids[i];
        }
        ASSERT_EQ(assembled, global[s]) << before << "->" << after << " step " << s;
        if (s > 12) break;  // a few steps per pair keeps the test quick
      }
    }
}

TEST(Loader, NewEpochHasANewShuffleAndResetsCounters) {
  DataConfig config = set_a_config();
  Loader loader(config);
  const std::uint64_t per_epoch = loader.batches_per_epoch();
  std::vector<std::uint64_t> e1, e2;
  for (std::uint64_t s = 0; s < per_epoch; ++s) {
    auto ids = loader.next_batch(0, 1).instance_ids;
    e1.insert(e1.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(loader.state().epoch, 2u);
  EXPECT_EQ(loader.state().batches_processed, 0u);
  Batch first_of_two = loader.next_batch(0, 1);
  EXPECT_EQ(first_of_two.epoch, 2u);
  e2 = first_of_two.instance_ids;
  EXPECT_FALSE(std::equal(e2.begin(), e2.end(), e1.begin()));
}

TEST(Loader, RefusesWorldSizesThatDoNotDivideTheBatch) {
  DataConfig config = set_a_config();  // 8 instances per batch
  Loader loader(config);
  EXPECT_THROW(loader.next_batch(0, 3), core::Error);
  EXPECT_THROW(loader.next_batch(4, 4), core::Error);
}

}  // namespace
}  // namespace tandem::data

namespace tandem::data {
namespace {

TEST(DataConfig, LabelledSourcesKeepMixOrderAndSortGlobs) {
  std::string dir = testing::temp_dir("mix");
  std::filesystem::create_directories(dir + "/web");
  for (const char* name : {"web/b.npy", "web/a.npy", "web/c.bin", "code.npy"})
    testing::write_tokens(dir + "/" + name, std::vector<std::uint16_t>(40, 7));
  DataConfig c = testing::parse_yaml(
      "data:\n"
      "  sources:\n"
      "    - {label: code, paths: [code.npy]}\n"
      "    - {label: web, paths: [\"web/*.npy\"]}\n"
      "  sequence_length: 8\n  global_batch_size: 16\n  seed: 1\n  vocab_size: 50000\n"
      "  eos_token_id: 0\n  pad_token_id: 1\n",
      dir);
  auto files = c.all_files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(std::filesystem::path(files[0]).filename(), "code.npy");
  EXPECT_EQ(std::filesystem::path(files[1]).filename(), "a.npy");
  EXPECT_EQ(std::filesystem::path(files[2]).filename(), "b.npy");
  EXPECT_EQ(c.dtype, io::TokenDtype::kU16);
  TokenDataset ds(c);
  EXPECT_EQ(ds.num_instances(), 15u);  // 5 per file, remainder dropped
  EXPECT_EQ(ds.source_label(0), "code");
  EXPECT_EQ(ds.source_label(2), "web");
  EXPECT_EQ(ds.locate(7).file, 1u);
  EXPECT_EQ(ds.locate(7).local_index, 2u);
}

}  // namespace
}  // namespace tandem::data
