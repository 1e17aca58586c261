#include "tandem/data/document_packing.h"

#include <algorithm>
#include <charconv>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>

#include "tandem/core/error.h"
#include "tandem/io/compressed_reader.h"

namespace tandem::data {
namespace {

void add_capped(std::uint32_t file, std::uint64_t start, std::uint64_t end, std::uint64_t max_len,
                LongDocStrategy strategy, std::vector<PackedDocument>& out) {
  if (end - start <= max_len || strategy == LongDocStrategy::kFragment) {
    for (std::uint64_t s = start; s < end; s += max_len)
      out.push_back({file, s, static_cast<std::uint32_t>(std::min(max_len, end - s))});
  } else {
    out.push_back({file, start, static_cast<std::uint32_t>(max_len)});
  }
}

}  // namespace

LongDocStrategy long_doc_strategy_from_name(const std::string& name) {
  if (name == "truncate") return LongDocStrategy::kTruncate;
  if (name == "fragment") return LongDocStrategy::kFragment;
  core::fail(
      "long_doc_strategy '{}' is not one of truncate, fragment (OLMo-core's LongDocStrategy)",
      name);
}

std::string long_doc_strategy_name(LongDocStrategy s) {
  return s == LongDocStrategy::kTruncate ? "truncate" : "fragment";
}

void find_documents(const io::TokenFile& tokens, std::uint32_t file, std::int64_t eos_token_id,
                    std::optional<std::int64_t> bos_token_id, std::int64_t max_length,
                    LongDocStrategy strategy, std::vector<PackedDocument>& out) {
  TANDEM_CHECK(max_length > 0 && max_length <= std::numeric_limits<std::uint32_t>::max(),
               "packing: bad sequence length {}", max_length);
  const auto eos = static_cast<std::uint64_t>(eos_token_id);
  const auto max_len = static_cast<std::uint64_t>(max_length);
  const std::uint64_t n = tokens.num_tokens();
  std::uint64_t doc_start = 0;
  bool previous_is_eos = false;
  tokens.for_each_chunk([&](std::uint64_t base, std::span<const std::int64_t> chunk) {
    for (std::uint64_t i = 0; i < chunk.size(); ++i) {
      const auto token = static_cast<std::uint64_t>(chunk[i]);
      if (!bos_token_id) {
        if (token != eos) continue;
        add_capped(file, doc_start, base + i + 1, max_len, strategy, out);
        doc_start = base + i + 1;
      } else {
        // The boundary is the EOS before this BOS: that document ends at this token.
        if (previous_is_eos && token == static_cast<std::uint64_t>(*bos_token_id)) {
          add_capped(file, doc_start, base + i, max_len, strategy, out);
          doc_start = base + i;
        }
        previous_is_eos = token == eos;
      }
    }
  });
  if (bos_token_id && previous_is_eos) add_capped(file, doc_start, n, max_len, strategy, out);
}

std::string metadata_path_for(const std::string& token_file) {
  const std::filesystem::path p(token_file);
  std::string name = p.filename().string();
  // Python's str.replace: every occurrence.
  for (std::size_t at = name.find(".npy"); at != std::string::npos; at = name.find(".npy", at + 7))
    name.replace(at, 4, ".csv.gz");
  return (p.parent_path() / name).string();
}

void find_documents_in_metadata(const std::string& metadata_path, std::uint64_t num_tokens,
                                std::uint32_t file, std::int64_t max_length,
                                LongDocStrategy strategy, std::vector<PackedDocument>& out) {
  auto source = io::open_byte_source(metadata_path);
  io::LineReader lines(*source);
  std::string line;
  while (lines.next(line)) {
    std::uint64_t start = 0, end = 0;
    const char* p = line.data();
    const char* last = line.data() + line.size();
    auto [after_start, e1] = std::from_chars(p, last, start);
    const bool ok = e1 == std::errc() && after_start < last && *after_start == ',' &&
                    std::from_chars(after_start + 1, last, end).ec == std::errc();
    TANDEM_CHECK(ok, "{} line {}: expected start,end[,...], got '{}'", metadata_path,
                 lines.line_number(), line.substr(0, 80));
    TANDEM_CHECK(start < num_tokens && end <= num_tokens,
                 "{} line {}: document [{}, {}) is out of bounds of its {} tokens", metadata_path,
                 lines.line_number(), start, end, num_tokens);
    TANDEM_CHECK(end > start, "{} line {}: empty document [{}, {})", metadata_path,
                 lines.line_number(), start, end);
    add_capped(file, start, end, static_cast<std::uint64_t>(max_length), strategy, out);
  }
}

PackedInstances pack_documents(std::vector<PackedDocument> documents, std::int64_t max_length) {
  TANDEM_CHECK(documents.size() < std::numeric_limits<std::uint32_t>::max(),
               "packing: {} documents in one group, more than 2^32 - 1", documents.size());
  std::vector<std::uint32_t> order(documents.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return documents[a].length > documents[b].length;
  });
  PackedInstances p;
  p.documents.reserve(documents.size());
  for (std::uint32_t i : order) p.documents.push_back(documents[i]);

  // Room left -> the instances with that much room, oldest first; only non-empty queues kept.
  std::map<std::uint64_t, std::deque<std::uint32_t>> by_room;
  std::vector<std::vector<std::uint32_t>> bins;
  const auto capacity = static_cast<std::uint64_t>(max_length);
  for (std::uint32_t d = 0; d < p.documents.size(); ++d) {
    const std::uint64_t len = p.documents[d].length;
    TANDEM_CHECK(len > 0 && len <= capacity, "packing: a document of {} tokens for instances of {}",
                 len, capacity);
    std::uint32_t bin = 0;
    std::uint64_t room = capacity;
    auto fit = by_room.lower_bound(len);
    if (fit == by_room.end()) {
      bin = static_cast<std::uint32_t>(bins.size());
      bins.emplace_back();
    } else {
      room = fit->first;
      bin = fit->second.front();
      fit->second.pop_front();
      if (fit->second.empty()) by_room.erase(fit);
    }
    bins[bin].push_back(d);
    if (room > len) by_room[room - len].push_back(bin);
  }
  p.offsets.reserve(bins.size() + 1);
  p.offsets.push_back(0);
  p.members.reserve(p.documents.size());
  for (const auto& b : bins) {
    p.members.insert(p.members.end(), b.begin(), b.end());
    p.offsets.push_back(p.members.size());
  }
  return p;
}

}  // namespace tandem::data
