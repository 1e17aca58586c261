// Checkpoint hashing and verification shared by the ranks (train/checkpoint_hashing.h, the
// collective verify_checkpoint and latest_valid_checkpoint), on ranks that are threads of this
// process: each file is read by one rank, every rank ends with every digest, and a damaged file,
// whichever rank read it, is the same error on every rank, so that all choose the same checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "../support/thread_communicator.h"
#include "tandem/core/hash.h"
#include "tandem/dist/rank_agreement.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/checkpoint_hashing.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

using testing::ThreadRanks;

// Files of the sizes a small checkpoint of three ZeRO-1 ranks has, with pseudo-random contents.
const std::vector<std::pair<std::string, std::size_t>> kFiles = {
    {"state.json", 900},
    {"model/model.yaml", 400},
    {"model/shards.json", 150},
    {"model/shard-00000-of-00003.safetensors", 100000},
    {"model/shard-00001-of-00003.safetensors", 100000},
    {"model/shard-00002-of-00003.safetensors", 99000},
    {"optim/index.json", 120},
    {"optim/shard-00000-of-00003.safetensors", 200000},
    {"optim/shard-00001-of-00003.safetensors", 200000},
    {"optim/shard-00002-of-00003.safetensors", 199000},
};

void write_bytes(const fs::path& path, std::size_t n, std::uint32_t seed) {
  fs::create_directories(path.parent_path());
  std::string bytes(n, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    bytes[i] = static_cast<char>(seed >> 24);
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

// A checkpoint folder whose manifest lists kFiles with their sizes and digests.
std::string make_checkpoint(const std::string& checkpoints, std::int64_t step) {
  const fs::path dir = fs::path(checkpoints) / train::checkpoint_dir_name(step);
  nlohmann::json manifest = {{"format_version", 2}, {"step", step}};
  std::uint32_t seed = static_cast<std::uint32_t>(step);
  for (const auto& [name, bytes] : kFiles) {
    write_bytes(dir / name, bytes, ++seed);
    manifest["files"][name] = {{"bytes", bytes},
                               {"xxh64", core::xxh64_file_hex((dir / name).string())}};
  }
  testing::write_text((dir / "manifest.json").string(), manifest.dump(1));
  return dir.string();
}

void flip_byte(const std::string& path, std::size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x40));
}

std::vector<train::FileToHash> files_to_hash() {
  std::vector<train::FileToHash> files;
  for (const auto& [name, bytes] : kFiles) files.push_back({name, bytes});
  return files;
}

TEST(SharedCheckpointCheck, EachFileIsReadByOneRankAndEveryRankGetsEveryDigest) {
  const std::string dir = make_checkpoint(testing::temp_dir("shared_hash"), 4);
  std::vector<std::string> expected;
  std::uint64_t total = 0;
  for (const auto& [name, bytes] : kFiles) {
    expected.push_back(core::xxh64_file_hex(dir + "/" + name));
    total += bytes;
  }
  for (int world : {1, 2, 3, 5}) {
    std::vector<train::SharedDigests> got(static_cast<std::size_t>(world));
    auto errors = ThreadRanks(world).run([&](dist::Communicator& comm) {
      got[static_cast<std::size_t>(comm.rank())] =
          train::hash_files_shared(dir, files_to_hash(), comm);
    });
    std::uint64_t read = 0;
    for (int r = 0; r < world; ++r) {
      const train::SharedDigests& mine = got[static_cast<std::size_t>(r)];
      EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
      EXPECT_EQ(mine.digests, expected) << "rank " << r << " of " << world;
      // Every rank takes a share (10 files, at most 5 ranks), none the whole.
      EXPECT_GT(mine.bytes_read_here, 0u) << "rank " << r << " of " << world;
      if (world > 1) {
        EXPECT_LT(mine.bytes_read_here, total) << "rank " << r;
      }
      read += mine.bytes_read_here;
    }
    EXPECT_EQ(read, total) << "the ranks together read each file once (" << world << " ranks)";
  }
  // Three ranks, the checkpoint's writers: each hashes the two shards it wrote (rank 2's are
  // 298,000 bytes), then the small files go largest first to the least loaded, rank 2.
  std::vector<std::uint64_t> share(3, 0);
  ThreadRanks(3).run([&](dist::Communicator& comm) {
    share[static_cast<std::size_t>(comm.rank())] =
        train::hash_files_shared(dir, files_to_hash(), comm).bytes_read_here;
  });
  EXPECT_EQ(share, (std::vector<std::uint64_t>{300000, 300000, 298000 + 900 + 400 + 150 + 120}));
  // At another world size no file is pinned: largest first, the 200,000-byte shards to ranks 0
  // and 1.
  const std::vector<int> two = train::hashing_ranks(files_to_hash(), 2);
  EXPECT_EQ(two[7], 0);
  EXPECT_EQ(two[8], 1);
}

TEST(SharedCheckpointCheck, AFileOneRankCannotReadIsAnErrorOnEveryRank) {
  // Rank 1's model shard, a directory now: read by rank 1 of 3. Then a small one, read by rank 2.
  for (const std::string name : {"model/shard-00001-of-00003.safetensors", "optim/index.json"}) {
    const std::string dir = make_checkpoint(testing::temp_dir("shared_hash_unreadable"), 4);
    fs::remove(dir + "/" + name);
    fs::create_directories(dir + "/" + name);
    auto errors = ThreadRanks(3).run(
        [&](dist::Communicator& comm) { train::hash_files_shared(dir, files_to_hash(), comm); });
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(errors[static_cast<std::size_t>(r)].find(name), std::string::npos)
          << "rank " << r << ": " << errors[static_cast<std::size_t>(r)];
      EXPECT_EQ(errors[static_cast<std::size_t>(r)], errors[0]);
    }
  }
}

TEST(SharedCheckpointCheck, ADamagedFileIsTheSameErrorOnEveryRankWhicheverRankReadIt) {
  const std::string dir = make_checkpoint(testing::temp_dir("shared_verify"), 4);
  auto errors =
      ThreadRanks(3).run([&](dist::Communicator& comm) { train::verify_checkpoint(dir, comm); });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const std::vector<int> reader = train::hashing_ranks(files_to_hash(), 3);
  std::vector<bool> reader_seen(3, false);
  for (std::size_t i = 0; i < kFiles.size(); ++i) {
    const std::string path = dir + "/" + kFiles[i].first;
    flip_byte(path, kFiles[i].second / 2);
    errors =
        ThreadRanks(3).run([&](dist::Communicator& comm) { train::verify_checkpoint(dir, comm); });
    flip_byte(path, kFiles[i].second / 2);
    reader_seen[static_cast<std::size_t>(reader[i])] = true;
    for (int r = 0; r < 3; ++r)
      EXPECT_EQ(errors[static_cast<std::size_t>(r)],
                "checkpoint file " + path + " fails its checksum")
          << "rank " << r << ", file read by rank " << reader[i];
  }
  // The damaged files were read by every one of the ranks in turn.
  EXPECT_EQ(reader_seen, (std::vector<bool>{true, true, true}));
  // A file of another size is found before any hashing, alike on every rank.
  testing::write_text(dir + "/optim/index.json", "{}");
  errors =
      ThreadRanks(3).run([&](dist::Communicator& comm) { train::verify_checkpoint(dir, comm); });
  for (const std::string& e : errors)
    EXPECT_EQ(e, "checkpoint file " + dir + "/optim/index.json is 2 bytes, manifest says 120");
}

TEST(SharedCheckpointCheck, EveryRankChoosesTheSameCheckpointPassingOverADamagedOne) {
  const std::string checkpoints = testing::temp_dir("shared_latest") + "/checkpoints";
  make_checkpoint(checkpoints, 2);
  const std::string newest = make_checkpoint(checkpoints, 4);
  // Rank 1 of 3 reads its optimizer shard.
  flip_byte(newest + "/optim/shard-00001-of-00003.safetensors", 7);
  std::vector<std::optional<std::string>> chosen(3);
  std::vector<std::vector<std::string>> warnings(3);
  auto errors = ThreadRanks(3).run([&](dist::Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    chosen[r] = train::latest_valid_checkpoint(checkpoints, &warnings[r], comm);
  });
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "");
    ASSERT_TRUE(chosen[r].has_value()) << "rank " << r;
    EXPECT_EQ(fs::path(*chosen[r]).filename(), "step-000002") << "rank " << r;
    ASSERT_EQ(warnings[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(warnings[r][0], "skipping damaged checkpoint: checkpoint file " + newest +
                                  "/optim/shard-00001-of-00003.safetensors fails its checksum");
  }
  // One rank's process alone comes to the same choice.
  EXPECT_EQ(train::latest_valid_checkpoint(checkpoints, nullptr), chosen[0]);
}

}  // namespace
}  // namespace tandem
