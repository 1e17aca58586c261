// What `dataset: packed` reads beside the token files. The first byte chooses:
//   0  a document metadata file (<name>.csv.gz) whose text is the rest, gzip-compressed here;
//   1  the same file with the rest as its raw bytes (a damaged or foreign compressed file);
//   2  OLMo-core's packing cache of a two-file group: the rest split by its first two bytes into
//      document-indices, instance-offsets and documents-by-instance (uint64 arrays).
// The second byte picks the sequence length (and for 0 and 1 the long-document strategy).
#include <zlib.h>

#include "fuzz_util.h"
#include "tandem/data/document_packing.h"
#include "tandem/data/packing_cache.h"

namespace {

void write_gzip(const std::string& path, std::string_view text) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) return;
  if (!text.empty()) gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::data;
  if (size < 2) return 0;
  const std::uint8_t mode = data[0] % 3;
  const std::int64_t sequence_length = std::int64_t{1} << (data[1] % 12);  // 1 .. 2048
  const auto strategy = (data[1] & 0x80) ? LongDocStrategy::kFragment : LongDocStrategy::kTruncate;
  const std::string_view rest = fuzz::as_text(data + 2, size - 2);
  constexpr std::uint64_t kFileTokens = 4096;

  if (mode < 2) {
    const std::string path = fuzz::scratch_dir() + "/part-00.csv.gz";
    if (mode == 0)
      write_gzip(path, rest);
    else
      fuzz::scratch_file("part-00.csv.gz", rest);
    fuzz::expect_clean([&] {
      std::vector<PackedDocument> docs;
      find_documents_in_metadata(path, kFileTokens, 0, sequence_length, strategy, docs);
      if (!docs.empty() && docs.size() < (1u << 16)) (void)pack_documents(docs, sequence_length);
    });
    return 0;
  }

  PackingGroup g;
  g.paths = {"part-00.npy", "part-01.npy"};
  g.size_bytes = {2 * kFileTokens, 2 * 1000};
  g.num_tokens = {kFileTokens, 1000};
  g.first_file = 3;
  g.sequence_length = sequence_length;
  g.strategy = strategy;
  const std::string work_dir = fuzz::scratch_dir() + "/work";
  const std::vector<std::string> paths = packing_cache_paths(work_dir, g);
  std::filesystem::create_directories(std::filesystem::path(paths[0]).parent_path());
  const std::size_t a = rest.empty() ? 0 : static_cast<std::uint8_t>(rest[0]) * 8;
  const std::size_t b = rest.size() < 2 ? 0 : static_cast<std::uint8_t>(rest[1]) * 8;
  const std::string_view arrays = rest.substr(std::min<std::size_t>(2, rest.size()));
  const std::string_view first = arrays.substr(0, std::min(a, arrays.size()));
  const std::string_view tail = arrays.substr(first.size());
  const std::string_view second = tail.substr(0, std::min(b, tail.size()));
  const std::string_view third = tail.substr(second.size());
  for (const auto& [path, bytes] :
       {std::pair{paths[0], first}, std::pair{paths[1], second}, std::pair{paths[2], third}}) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  fuzz::expect_clean([&] {
    if (auto packed = read_packing_cache(work_dir, g)) (void)packed->num_instances();
  });
  return 0;
}
