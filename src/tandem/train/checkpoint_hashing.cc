#include "tandem/train/checkpoint_hashing.h"

#include <filesystem>
#include <regex>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/dist/rank_agreement.h"

namespace fs = std::filesystem;

namespace tandem::train {

std::vector<int> hashing_ranks(const std::vector<FileToHash>& files, int world) {
  static const std::regex kShard(R"(shard-(\d{5})-of-(\d{5})\.safetensors)");
  std::vector<std::uint64_t> sizes;
  std::vector<int> writer;
  for (const FileToHash& f : files) {
    sizes.push_back(f.bytes);
    const std::string name = fs::path(f.name).filename().string();
    std::smatch m;
    int rank = -1;
    if (std::regex_match(name, m, kShard) && std::stoi(m[2]) == world && std::stoi(m[1]) < world)
      rank = std::stoi(m[1]);
    writer.push_back(rank);
  }
  return dist::share_by_size(sizes, world, writer);
}

SharedDigests hash_files_shared(const std::string& dir, const std::vector<FileToHash>& files,
                                dist::Communicator& comm) {
  SharedDigests out;
  const std::vector<int> owner = hashing_ranks(files, comm.world_size());
  // Each digest as two 32-bit halves, which doubles hold exactly: the owner puts its halves in
  // place and every other rank zeros, so the sum over ranks is the digest.
  std::vector<double> halves(2 * files.size(), 0.0);
  std::string error;
  for (std::size_t i = 0; i < files.size() && error.empty(); ++i) {
    if (owner[i] != comm.rank()) continue;
    try {
      const std::uint64_t digest = core::xxh64_file((fs::path(dir) / files[i].name).string());
      halves[2 * i] = static_cast<double>(digest >> 32);
      halves[2 * i + 1] = static_cast<double>(digest & 0xffffffffu);
      out.bytes_read_here += files[i].bytes;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  dist::fail_if_any_rank_failed(error, comm);
  comm.all_reduce_sum(halves.data(), halves.size());
  for (std::size_t i = 0; i < files.size(); ++i)
    out.digests.push_back(core::to_hex64(static_cast<std::uint64_t>(halves[2 * i]) << 32 |
                                         static_cast<std::uint64_t>(halves[2 * i + 1])));
  return out;
}

}  // namespace tandem::train
