#include "tandem/data/token_dataset.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include <fmt/ranges.h>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/packing_cache.h"

namespace tandem::data {
namespace {

std::string python_optional(const std::optional<std::int64_t>& v) {
  return v ? std::to_string(*v) : "None";
}

// OLMo-core's get_document_lengths of a token span: a document ends at EOS (with a BOS id, at EOS
// followed by BOS) and at the span's end.
std::vector<std::int64_t> span_document_lengths(std::span<const std::int64_t> ids, std::int64_t eos,
                                                std::optional<std::int64_t> bos) {
  std::vector<std::int64_t> out;
  std::int64_t start = 0;
  const auto n = static_cast<std::int64_t>(ids.size());
  for (std::int64_t t = 0; t < n; ++t) {
    const bool ends = bos ? (t + 1 < n && ids[t] == eos && ids[t + 1] == *bos) || t + 1 == n
                          : ids[t] == eos || t + 1 == n;
    if (ends) out.push_back(t + 1 - start), start = t + 1;
  }
  return out;
}

// repr() of a Python str: single quotes unless it holds one and no double quote.
std::string python_str_repr(const std::string& text) {
  const bool dq = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : text) {
    if (ch == '\\' || ch == quote) out += '\\';
    out += ch;
  }
  return out + quote;
}

// Each distinct token (and label mask) file holds a descriptor while the data is open. Refused
// up front when they would not fit under the limit with room to spare: running out half-way
// would also starve the run's logs, checkpoints and communication (and the sanitizers).
void check_descriptor_room(const DataConfig& config, const std::vector<std::string>& files) {
  constexpr std::uint64_t kHeadroom = 64;
  std::unordered_set<std::string> distinct(files.begin(), files.end());
  distinct.insert(config.label_mask_files.begin(), config.label_mask_files.end());
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  const auto limit = static_cast<std::uint64_t>(lim.rlim_cur);
  TANDEM_CHECK(distinct.size() + kHeadroom <= limit,
               "the data opens {} token files, one descriptor each, and this process may hold "
               "{} (hard limit {}), too few with {} to spare: raise `ulimit -n`",
               distinct.size(), limit, static_cast<std::uint64_t>(lim.rlim_max), kHeadroom);
}

}  // namespace

TokenDataset::TokenDataset(const DataConfig& config)
    : sequence_length_(config.sequence_length),
      vocab_size_(static_cast<std::uint64_t>(config.vocab_size)),
      pad_token_id_(config.pad_token_id),
      eos_token_id_(config.eos_token_id),
      bos_token_id_(config.bos_token_id) {
  TANDEM_CHECK(config.sequence_length > 0, "sequence_length must be positive");
  const std::uint64_t window = static_cast<std::uint64_t>(
      config.max_target_sequence_length.value_or(config.sequence_length));
  const std::uint64_t per_window = window / static_cast<std::uint64_t>(config.sequence_length);
  offsets_.push_back(0);
  const bool mixture = !config.file_token_limits.empty();
  const std::vector<std::string> all_files = config.all_files();
  TANDEM_CHECK(!mixture || config.file_token_limits.size() == all_files.size(),
               "{} token limits for {} token files", config.file_token_limits.size(),
               all_files.size());
  check_descriptor_room(config, all_files);
  // A file listed more than once (a mix's repeated line, an upsampled mixture source) is opened
  // once: AI2's mixes list thousands of files, each holding a descriptor.
  std::unordered_map<std::string, std::shared_ptr<const io::TokenFile>> opened;
  for (const auto& src : config.sources) {
    for (const auto& path : src.files) {
      std::shared_ptr<const io::TokenFile>& f = opened[path];
      if (!f) {
        TANDEM_CHECK(std::filesystem::exists(path), "token file {} does not exist", path);
        f = std::make_shared<const io::TokenFile>(path, config.dtype);
      }
      TANDEM_CHECK(f->num_tokens() > 0, "token file {} is empty", path);
      // A mixture reads only the tokens allocated to this entry, from the file's start.
      const std::uint64_t tokens =
          mixture ? config.file_token_limits[files_.size()] : f->num_tokens();
      TANDEM_CHECK(tokens <= f->num_tokens(), "{} tokens of {} allocated, which holds {}", tokens,
                   path, f->num_tokens());
      entry_tokens_.push_back(tokens);
      std::uint64_t instances = (tokens / window) * per_window;
      offsets_.push_back(offsets_.back() + instances);
      files_.push_back(f);
      labels_.push_back(src.label);
    }
  }
  TANDEM_CHECK(!files_.empty(), "the data config names no token files");
  TANDEM_CHECK(config.label_mask_files.empty() || config.label_mask_files.size() == files_.size(),
               "{} label mask files for {} token files", config.label_mask_files.size(),
               files_.size());
  for (std::size_t i = 0; i < config.label_mask_files.size(); ++i) {
    const std::string& path = config.label_mask_files[i];
    masks_.push_back(std::make_unique<io::TokenFile>(path, io::TokenDtype::kU8));
    TANDEM_CHECK(masks_.back()->num_tokens() == files_[i]->num_tokens(),
                 "label mask file {} holds {} entries for the {} tokens of {}", path,
                 masks_.back()->num_tokens(), files_[i]->num_tokens(), files_[i]->path());
  }
  if (config.packing) pack(config);

  std::string text = config.packing ? "class=NumpyPackedFSLDataset"
                     : mixture      ? "class=NumpyFSLDatasetMixture"
                                    : "class=NumpyFSLDataset";
  text += fmt::format("vocab_size={},", config.vocab_size);
  text += fmt::format("pad_token_id={},", config.pad_token_id);
  text += fmt::format("eos_token_id={},", config.eos_token_id);
  text += fmt::format("dtype=<class 'numpy.{}'>,", io::token_dtype_name(config.dtype));
  if (config.packing) {
    text += fmt::format("long_doc_strategy={},",
                        long_doc_strategy_name(config.packing->long_doc_strategy));
    text += fmt::format("bos_token_id={},", python_optional(config.bos_token_id));
    text += fmt::format("sequence_length={},", config.sequence_length);
    if (config.packing->source_group_size > 1)
      text += fmt::format("source_group_size={},", config.packing->source_group_size);
    if (config.packing->use_array_if_local)
      text += fmt::format("use_array_if_local={},",
                          *config.packing->use_array_if_local ? "True" : "False");
    if (config.packing->documents_from_metadata()) {
      // A Python tuple of (basename, sha256) tuples, as OLMo-core formats it.
      std::vector<std::string> items;
      for (std::size_t i = 0; i < files_.size(); ++i)
        items.push_back(fmt::format(
            "({}, '{}')",
            python_str_repr(std::filesystem::path(files_[i]->path()).filename().string()),
            metadata_sha256_[i]));
      text += fmt::format("_metadata_fingerprint=({}{}),", fmt::join(items, ", "),
                          items.size() == 1 ? "," : "");
    }
  } else {
    text += fmt::format("max_target_sequence_length={},",
                        python_optional(config.max_target_sequence_length));
    text += fmt::format("bos_token_id={},", python_optional(config.bos_token_id));
  }
  for (std::size_t i = 0; i < files_.size(); ++i)
    text += fmt::format("path={},size={},",
                        std::filesystem::path(files_[i]->path()).filename().string(),
                        file_size_bytes(i));
  fingerprint_ = core::sha256_hex(std::string_view(text));

  if (config.validate_token_ids) validate_token_ids();
}

void TokenDataset::pack(const DataConfig& config) {
  const PackingConfig& p = *config.packing;
  if (p.documents_from_metadata()) {
    for (const auto& f : files_) {
      const std::string metadata = metadata_path_for(f->path());
      TANDEM_CHECK(std::filesystem::is_regular_file(metadata),
                   "{}: no such metadata file (use_array_if_local: false reads the document "
                   "boundaries of {} from it)",
                   metadata, f->path());
      metadata_sha256_.push_back(core::sha256_file(metadata));
    }
  }
  const auto group_size = static_cast<std::size_t>(p.source_group_size);
  offsets_.assign(1, 0);
  for (std::size_t first = 0; first < files_.size(); first += group_size) {
    const std::size_t end = std::min(files_.size(), first + group_size);
    PackingGroup g;
    g.first_file = static_cast<std::uint32_t>(first);
    g.sequence_length = config.sequence_length;
    g.strategy = p.long_doc_strategy;
    for (std::size_t f = first; f < end; ++f) {
      g.paths.push_back(files_[f]->path());
      g.size_bytes.push_back(files_[f]->size_bytes());
      g.num_tokens.push_back(files_[f]->num_tokens());
    }
    if (p.use_array_if_local)
      g.extra_ids.push_back(
          fmt::format("use_array_if_local={}", *p.use_array_if_local ? "True" : "False"));
    if (p.documents_from_metadata())
      for (std::size_t f = first; f < end; ++f)
        g.extra_ids.push_back(
            fmt::format("metadata={},sha256={}", files_[f]->path(), metadata_sha256_[f]));
    std::optional<PackedInstances> cached;
    if (!config.work_dir.empty()) cached = read_packing_cache(config.work_dir, g);
    if (cached) {
      groups_.push_back(std::move(*cached));
    } else {
      std::vector<PackedDocument> documents;
      for (std::size_t f = first; f < end; ++f) {
        if (p.documents_from_metadata())
          find_documents_in_metadata(metadata_path_for(files_[f]->path()), files_[f]->num_tokens(),
                                     static_cast<std::uint32_t>(f), config.sequence_length,
                                     p.long_doc_strategy, documents);
        else
          find_documents(*files_[f], static_cast<std::uint32_t>(f), config.eos_token_id,
                         config.bos_token_id, config.sequence_length, p.long_doc_strategy,
                         documents);
      }
      groups_.push_back(pack_documents(std::move(documents), config.sequence_length));
      if (!config.work_dir.empty()) write_packing_cache(config.work_dir, g, groups_.back());
    }
    group_first_file_.push_back(first);
    offsets_.push_back(offsets_.back() + groups_.back().num_instances());
  }
}

InstanceLocation TokenDataset::locate(std::uint64_t instance) const {
  TANDEM_CHECK(instance < num_instances(), "instance {} out of range ({} instances)", instance,
               num_instances());
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), instance);
  std::size_t unit = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  return {packed() ? group_first_file_[unit] : unit, instance - offsets_[unit]};
}

std::pair<const PackedInstances*, std::uint64_t> TokenDataset::packed_instance(
    std::uint64_t instance) const {
  TANDEM_CHECK(instance < num_instances(), "instance {} out of range ({} instances)", instance,
               num_instances());
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), instance);
  const auto group = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  return {&groups_[group], instance - offsets_[group]};
}

// Every id that reaches a batch is checked (validate_token_ids scans all of them up front): an
// id past the vocabulary would index a padding row of the embedding silently.
void TokenDataset::check_ids(std::span<const std::int64_t> ids, std::size_t file,
                             std::uint64_t start) const {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<std::uint64_t>(ids[i]) >= vocab_size_) {
      core::fail(
          "{}: token id {} at token offset {} is >= vocab_size {} (a corrupt or foreign token "
          "file?)",
          files_[file]->path(), ids[i], start + i, vocab_size_);
    }
  }
}

void TokenDataset::read_instance(std::uint64_t instance, std::span<std::int64_t> out,
                                 std::span<std::uint8_t> label_mask) const {
  TANDEM_CHECK(out.size() == static_cast<std::size_t>(sequence_length_) &&
                   (label_mask.empty() || label_mask.size() == out.size()),
               "read_instance: buffers of {} tokens and {} mask entries for sequence_length {}",
               out.size(), label_mask.size(), sequence_length_);
  if (!packed()) {
    InstanceLocation loc = locate(instance);
    const std::uint64_t start = loc.local_index * static_cast<std::uint64_t>(sequence_length_);
    files_[loc.file]->read(start, static_cast<std::uint64_t>(sequence_length_), out.data());
    check_ids(out, loc.file, start);
    if (!label_mask.empty()) read_mask(loc.file, start, label_mask);
    return;
  }
  const auto [group, local] = packed_instance(instance);
  const PackedInstances& g = *group;
  std::size_t filled = 0;
  for (std::uint64_t m = g.offsets[local]; m < g.offsets[local + 1]; ++m) {
    const PackedDocument& d = g.documents[g.members[m]];
    std::span<std::int64_t> part = out.subspan(filled, d.length);
    files_[d.file]->read(d.start, d.length, part.data());
    check_ids(part, d.file, d.start);
    if (!label_mask.empty()) read_mask(d.file, d.start, label_mask.subspan(filled, d.length));
    filled += d.length;
  }
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(filled), out.end(), pad_token_id_);
  if (!label_mask.empty())
    std::fill(label_mask.begin() + static_cast<std::ptrdiff_t>(filled), label_mask.end(), 0);
}

// The tokens' own masks (label_mask_paths), else all 1.
void TokenDataset::read_mask(std::size_t file, std::uint64_t start,
                             std::span<std::uint8_t> out) const {
  if (masks_.empty()) {
    std::fill(out.begin(), out.end(), 1);
    return;
  }
  masks_[file]->read_bytes(start, out.size(), out.data());
  for (std::uint8_t& m : out) m = m != 0;
}

void TokenDataset::document_starts(std::uint64_t instance, std::span<std::int64_t> starts) const {
  TANDEM_CHECK(documents_from_metadata() && starts.size() == std::size_t(sequence_length_),
               "document_starts: only for packed metadata documents, {} entries", starts.size());
  std::vector<std::int64_t> lengths = document_lengths(instance);
  std::int64_t used = 0;
  for (std::int64_t len : lengths) used += len;
  if (used < sequence_length_) {
    // The padding as OLMo-core's __getitem__ segments it; with a BOS id the scan starts at the
    // last real token and its first piece joins the last document.
    const std::vector<std::int64_t> pad(static_cast<std::size_t>(sequence_length_ - used) + 1,
                                        pad_token_id_);
    std::vector<std::int64_t> tail = pad;
    if (bos_token_id_) {
      // The last real token: the last token of the instance's last document (one read).
      const auto [group, local] = packed_instance(instance);
      const PackedDocument& last = group->documents[group->members[group->offsets[local + 1] - 1]];
      tail[0] = static_cast<std::int64_t>(files_[last.file]->token(last.start + last.length - 1));
      const auto pieces = span_document_lengths(tail, eos_token_id_, bos_token_id_);
      lengths.back() += pieces[0] - 1;
      lengths.insert(lengths.end(), pieces.begin() + 1, pieces.end());
    } else {
      const auto pieces =
          span_document_lengths(std::span(pad).subspan(1), eos_token_id_, std::nullopt);
      lengths.insert(lengths.end(), pieces.begin(), pieces.end());
    }
  }
  std::size_t t = 0;
  for (std::int64_t len : lengths) {
    for (std::int64_t k = 0; k < len; ++k) starts[t + std::size_t(k)] = std::int64_t(t);
    t += std::size_t(len);
  }
}

std::vector<std::int64_t> TokenDataset::document_lengths(std::uint64_t instance) const {
  TANDEM_CHECK(instance < num_instances(), "instance {} out of range ({} instances)", instance,
               num_instances());
  if (!packed()) return {};
  const auto [group, local] = packed_instance(instance);
  const PackedInstances& g = *group;
  std::vector<std::int64_t> out;
  for (std::uint64_t m = g.offsets[local]; m < g.offsets[local + 1]; ++m)
    out.push_back(g.documents[g.members[m]].length);
  return out;
}

void TokenDataset::validate_token_ids() const {
  std::unordered_set<const io::TokenFile*> seen;
  for (const auto& f : files_) {
    if (!seen.insert(f.get()).second) continue;  // a file listed again: scanned already
    const std::uint64_t item = io::token_dtype_size(f->dtype());
    f->for_each_chunk([&](std::uint64_t base, std::span<const std::int64_t> chunk) {
      for (std::uint64_t i = 0; i < chunk.size(); ++i) {
        const auto id = static_cast<std::uint64_t>(chunk[i]);
        TANDEM_CHECK(id < vocab_size_,
                     "{}: token id {} at token offset {} (byte offset {}) is >= vocab_size {}",
                     f->path(), id, base + i, (base + i) * item, vocab_size_);
      }
    });
  }
}

}  // namespace tandem::data
