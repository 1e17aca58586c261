// The FSDP sharding arithmetic (dist/fsdp_shards.h): every unit split into contiguous ranges
// that tile it, rank 0 holding the largest, the pieces of all ranks covering every parameter
// element exactly once, and a rank's element count equal to what `tandem plan` counts.
#include <gtest/gtest.h>

#include <map>

#include "tandem/core/error.h"
#include "tandem/dist/fsdp_shards.h"
#include "tandem/model/model_config.h"
#include "tandem/train/plan.h"

namespace tandem {
namespace {

model::ModelConfig small_config() {
  // An odd vocabulary and widths, so that no unit divides evenly by 3 or 4.
  return model::load_model_config(
      std::string(TANDEM_SOURCE_DIR) + "/configs/models/olmo3-tiny.yaml",
      {"model.vocab_size=301", "model.pad_vocab_to_multiple_of=1", "model.n_layers=3",
       "model.hidden_size=97"});
}

TEST(FsdpShards, RangesTileEveryUnitAndPiecesCoverEveryParameterOnce) {
  const model::ModelConfig c = small_config();
  const model::ParameterLayout layout(c);
  const auto units = model::parameter_units(layout);
  ASSERT_EQ(units.size(), static_cast<std::size_t>(c.n_layers + 2));
  EXPECT_EQ(units.front().begin, 0);
  EXPECT_EQ(units.back().end, layout.total());
  for (int S : {1, 2, 3, 4, 7}) {
    std::map<std::size_t, std::int64_t> covered;  // parameter -> elements held over all ranks
    for (int g = 0; g < S; ++g) {
      const dist::FsdpShards shards(layout, S, g);
      std::int64_t local = 0;
      for (std::size_t u = 0; u < units.size(); ++u) {
        const auto& off = shards.offsets(static_cast<int>(u));
        ASSERT_EQ(off.size(), static_cast<std::size_t>(S + 1));
        EXPECT_EQ(off.front(), 0u);
        EXPECT_EQ(off.back(), static_cast<std::size_t>(units[u].size()));
        for (int r = 0; r < S; ++r) {
          EXPECT_LE(off[r], off[r + 1]);
          // Rank 0 holds the largest range of every unit: ceil(n / S).
          EXPECT_LE(off[r + 1] - off[r], off[1]) << "unit " << u << " S=" << S;
        }
        EXPECT_EQ(off[1], static_cast<std::size_t>((units[u].size() + S - 1) / S));
        EXPECT_EQ(shards.local_begin(static_cast<int>(u)), local);
        local += shards.local_size(static_cast<int>(u));
      }
      EXPECT_EQ(shards.shard_size(), local);
      std::int64_t last_local = -1;
      for (const auto& p : shards.pieces()) {
        const model::ParameterEntry& e = layout.entries()[p.param_index];
        EXPECT_GE(p.start, 0);
        EXPECT_LE(p.start + p.length, e.numel) << e.name;
        EXPECT_GT(p.local, last_local);
        EXPECT_LE(p.local + p.length, shards.shard_size());
        last_local = p.local;
        covered[p.param_index] += p.length;
      }
    }
    for (std::size_t i = 0; i < layout.entries().size(); ++i)
      EXPECT_EQ(covered[i], layout.entries()[i].numel) << layout.entries()[i].name << " S=" << S;
  }
}

TEST(FsdpShards, RankZeroHoldsWhatThePlannerCounts) {
  train::PlanInput in;
  in.model = small_config();
  in.sequence_length = 16;
  in.global_batch_instances = 4;
  in.device = train::device_spec("cpu");
  for (int W : {2, 4}) {
    in.world_size = W;
    in.dist.strategy = dist::Strategy::kFsdp;
    const train::Plan plan = train::make_plan(in);
    const dist::FsdpShards shards(model::ParameterLayout(in.model), W, 0);
    for (const auto& item : plan.memory) {
      if (item.name == "parameters" || item.name == "gradients") {
        EXPECT_EQ(item.bytes, 4.0 * static_cast<double>(shards.shard_size())) << item.name;
      }
    }
  }
}

TEST(FsdpShards, RejectsARankOutsideTheGroup) {
  const model::ParameterLayout layout(small_config());
  EXPECT_THROW(dist::FsdpShards shards(layout, 2, 2), core::Error);
  EXPECT_THROW(dist::FsdpShards shards(layout, 0, 0), core::Error);
}

}  // namespace
}  // namespace tandem
