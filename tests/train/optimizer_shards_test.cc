// Sharded optimizer state: moments written as uneven shards by 3 "ranks" read back at other
// splits (whole tensors, 2 ranges, ranges crossing shard borders) bit for bit; an index is
// refused when the shards leave a gap or overlap; a reader asking for a wrong shape is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"
#include "tandem/train/optimizer_shards.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

// Two parameters laid out in one flat buffer (like the model's): "a" 3x4 then "b" 10.
struct FlatMoments {
  std::vector<float> avg, avg_sq;
  FlatMoments() : avg(22), avg_sq(22) {
    std::iota(avg.begin(), avg.end(), 1.0f);
    for (std::size_t i = 0; i < avg_sq.size(); ++i) avg_sq[i] = 0.5f * static_cast<float>(i * i);
  }
};

struct Param {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset, numel;
};
const std::vector<Param> kParams = {{"a", {3, 4}, 0, 12}, {"b", {10}, 12, 10}};

// The slices of flat range [begin, end), pointing into `m` (as ZeRO-1 ranges do).
std::vector<train::MomentSlice> slices_of(FlatMoments& m, std::size_t begin, std::size_t end) {
  std::vector<train::MomentSlice> out;
  for (const Param& p : kParams) {
    const std::size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    out.push_back({p.name, p.shape, static_cast<std::int64_t>(lo - p.offset),
                   std::span<float>(m.avg).subspan(lo, hi - lo),
                   std::span<float>(m.avg_sq).subspan(lo, hi - lo)});
  }
  return out;
}

std::string write_shards(const std::string& name, const std::vector<std::size_t>& cuts) {
  const std::string dir = testing::temp_dir(name);
  FlatMoments m;
  const int n = static_cast<int>(cuts.size()) - 1;
  for (int s = 0; s < n; ++s)
    train::write_optimizer_shard(dir, s, n, slices_of(m, cuts[s], cuts[s + 1]), 7);
  return dir;
}

TEST(OptimizerShards, UnevenShardsReadBackAtAnySplit) {
  // 3 writers; the second one's range crosses the a/b border.
  const std::string dir = write_shards("optim_shards_read", {0, 5, 15, 22});
  train::write_optimizer_index(dir, 3);
  const FlatMoments expected;
  for (const auto& cuts :
       std::vector<std::vector<std::size_t>>{{0, 22}, {0, 11, 22}, {0, 3, 12, 20, 22}}) {
    FlatMoments got;
    std::fill(got.avg.begin(), got.avg.end(), -1.0f);
    std::fill(got.avg_sq.begin(), got.avg_sq.end(), -1.0f);
    for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
      auto slices = slices_of(got, cuts[r], cuts[r + 1]);
      EXPECT_EQ(train::read_optimizer_state(dir, slices), 7);
    }
    EXPECT_EQ(got.avg, expected.avg) << cuts.size() - 1 << " readers";
    EXPECT_EQ(got.avg_sq, expected.avg_sq) << cuts.size() - 1 << " readers";
  }
}

TEST(OptimizerShards, GapOrOverlapIsRefusedWhenIndexing) {
  FlatMoments m;
  const std::string gap = testing::temp_dir("optim_shards_gap");
  train::write_optimizer_shard(gap, 0, 2, slices_of(m, 0, 10), 1);
  train::write_optimizer_shard(gap, 1, 2, slices_of(m, 11, 22), 1);  // element 10 ("a"[10]) missing
  EXPECT_THROW(
      {
        try {
          train::write_optimizer_index(gap, 2);
        } catch (const core::Error& e) {
          EXPECT_NE(std::string(e.what()).find("gap"), std::string::npos) << e.what();
          throw;
        }
      },
      core::Error);
  const std::string overlap = testing::temp_dir("optim_shards_overlap");
  train::write_optimizer_shard(overlap, 0, 2, slices_of(m, 0, 14), 1);
  train::write_optimizer_shard(overlap, 1, 2, slices_of(m, 13, 22), 1);
  EXPECT_THROW(train::write_optimizer_index(overlap, 2), core::Error);
}

TEST(OptimizerShards, WrongShapeOrMissingIndexIsRefused) {
  const std::string dir = write_shards("optim_shards_shape", {0, 22});
  FlatMoments m;
  EXPECT_THROW(
      {
        auto slices = slices_of(m, 0, 22);
        train::read_optimizer_state(dir, slices);  // no index.json yet
      },
      core::Error);
  train::write_optimizer_index(dir, 1);
  auto slices = slices_of(m, 0, 22);
  slices[0].shape = {4, 3};
  EXPECT_THROW(train::read_optimizer_state(dir, slices), core::Error);
}

TEST(OptimizerShards, UnshardedFormatOneFileReadsIntoRanges) {
  // Format 1: whole tensors in one optim.safetensors, the step count in its metadata.
  FlatMoments m;
  const std::string path = testing::temp_dir("optim_unsharded") + "/optim.safetensors";
  std::vector<io::TensorToWrite> tensors;
  for (const Param& p : kParams) {
    tensors.push_back({"exp_avg." + p.name, io::DType::kF32, p.shape, m.avg.data() + p.offset});
    tensors.push_back(
        {"exp_avg_sq." + p.name, io::DType::kF32, p.shape, m.avg_sq.data() + p.offset});
  }
  io::write_safetensors(path, tensors, {{"adam_step", "5"}});
  FlatMoments got;
  std::fill(got.avg.begin(), got.avg.end(), -1.0f);
  std::fill(got.avg_sq.begin(), got.avg_sq.end(), -1.0f);
  for (const auto& [begin, end] :
       std::vector<std::pair<std::size_t, std::size_t>>{{0, 7}, {7, 22}}) {
    auto slices = slices_of(got, begin, end);
    EXPECT_EQ(train::read_unsharded_optimizer_state(path, slices), 5);
  }
  EXPECT_EQ(got.avg, m.avg);
  EXPECT_EQ(got.avg_sq, m.avg_sq);
}

}  // namespace
}  // namespace tandem
