#include "tandem/data/packing_cache.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint64_t> read_u64(const std::string& path) {
  const std::string bytes = core::read_file(path);
  TANDEM_CHECK(bytes.size() % 8 == 0, "packing cache {}: {} bytes, not a uint64 array", path,
               bytes.size());
  std::vector<std::uint64_t> out(bytes.size() / 8);
  // Little-endian, as numpy wrote it; an empty array (a group without documents) has no buffer
  // to copy into (memcpy from or to null is undefined even for 0 bytes; the fuzzer found it).
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void write_u64(const std::string& path, const std::vector<std::uint64_t>& values) {
  core::AtomicFileWriter w(path);
  w.write(values.data(), values.size() * sizeof(std::uint64_t));
  w.commit();
}

}  // namespace

std::vector<std::string> packing_cache_paths(const std::string& work_dir, const PackingGroup& g) {
  // OLMo-core's _get_indices_path: str(path) and str(size) per file, then the extra ids.
  std::string key;
  for (std::size_t i = 0; i < g.paths.size(); ++i)
    key += g.paths[i] + std::to_string(g.size_bytes[i]);
  key += long_doc_strategy_name(g.strategy) + "uint64";
  for (const std::string& id : g.extra_ids) key += id;
  const std::string hash = core::sha256_hex(std::string_view(key));
  std::vector<std::string> out;
  for (const char* name : {"document-indices", "instance-offsets", "documents-by-instance"})
    out.push_back((fs::path(work_dir) / "dataset-common" /
                   fmt::format("{}-{}-{}.npy", name, g.sequence_length, hash))
                      .string());
  return out;
}

std::optional<PackedInstances> read_packing_cache(const std::string& work_dir,
                                                  const PackingGroup& g) {
  const std::vector<std::string> paths = packing_cache_paths(work_dir, g);
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return std::nullopt;
  }
  const std::vector<std::uint64_t> docs = read_u64(paths[0]);
  const std::vector<std::uint64_t> offsets = read_u64(paths[1]);
  const std::vector<std::uint64_t> members = read_u64(paths[2]);
  auto bad = [&](const std::string& file, const std::string& why) {
    core::fail(
        "packing cache {} does not fit the token files of {}: {} (delete the three "
        "files of this group to pack again)",
        file, g.paths.front(), why);
  };
  if (docs.size() % 2 != 0) bad(paths[0], "an odd number of entries");
  if (offsets.size() % 2 != 0) bad(paths[1], "an odd number of entries");
  if (docs.size() / 2 >= (std::uint64_t{1} << 32)) bad(paths[0], "more than 2^32 documents");

  PackedInstances p;
  const auto max_len = static_cast<std::uint64_t>(g.sequence_length);
  for (std::size_t d = 0; d < docs.size(); d += 2) {
    std::uint64_t start = docs[d], end = docs[d + 1], base = 0;
    std::size_t f = 0;
    while (f < g.num_tokens.size() && start >= base + g.num_tokens[f]) base += g.num_tokens[f++];
    if (f == g.num_tokens.size() || end <= start || end > base + g.num_tokens[f] ||
        end - start > max_len)
      bad(paths[0], fmt::format("document {} spans tokens [{}, {})", d / 2, start, end));
    p.documents.push_back({g.first_file + static_cast<std::uint32_t>(f), start - base,
                           static_cast<std::uint32_t>(end - start)});
  }
  std::vector<std::uint8_t> used(p.documents.size(), 0);
  p.offsets.push_back(0);
  for (std::size_t i = 0; i < offsets.size(); i += 2) {
    if (offsets[i] != p.offsets.back() || offsets[i + 1] < offsets[i] ||
        offsets[i + 1] > members.size())
      bad(paths[1], fmt::format("instance {} spans [{}, {})", i / 2, offsets[i], offsets[i + 1]));
    std::uint64_t tokens = 0;
    for (std::uint64_t m = offsets[i]; m < offsets[i + 1]; ++m) {
      if (members[m] >= p.documents.size() || used[members[m]]++)
        bad(paths[2], fmt::format("document {} is out of range or in two instances", members[m]));
      tokens += p.documents[members[m]].length;
      p.members.push_back(static_cast<std::uint32_t>(members[m]));
    }
    if (tokens > max_len) bad(paths[1], fmt::format("instance {} holds {} tokens", i / 2, tokens));
    p.offsets.push_back(offsets[i + 1]);
  }
  if (p.offsets.back() != members.size() || p.members.size() != p.documents.size())
    bad(paths[2], "documents left out of every instance");
  return p;
}

void write_packing_cache(const std::string& work_dir, const PackingGroup& g,
                         const PackedInstances& packed) {
  const std::vector<std::string> paths = packing_cache_paths(work_dir, g);
  fs::create_directories(fs::path(paths[0]).parent_path());
  std::vector<std::uint64_t> file_base(g.num_tokens.size(), 0);
  for (std::size_t f = 1; f < file_base.size(); ++f)
    file_base[f] = file_base[f - 1] + g.num_tokens[f - 1];
  std::vector<std::uint64_t> docs, offsets, members(packed.members.begin(), packed.members.end());
  for (const PackedDocument& d : packed.documents) {
    const std::uint64_t start = file_base[d.file - g.first_file] + d.start;
    docs.push_back(start);
    docs.push_back(start + d.length);
  }
  for (std::uint64_t i = 0; i < packed.num_instances(); ++i) {
    offsets.push_back(packed.offsets[i]);
    offsets.push_back(packed.offsets[i + 1]);
  }
  write_u64(paths[0], docs);
  write_u64(paths[1], offsets);
  write_u64(paths[2], members);
}

}  // namespace tandem::data
