#include "tandem/data/token_dataset.h"

#include <algorithm>
#include <filesystem>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"

namespace tandem::data {
namespace {

std::string python_optional(const std::optional<std::int64_t>& v) {
  return v ? std::to_string(*v) : "None";
}

}  // namespace

TokenDataset::TokenDataset(const DataConfig& config)
    : sequence_length_(config.sequence_length),
      vocab_size_(static_cast<std::uint64_t>(config.vocab_size)) {
  TANDEM_CHECK(config.sequence_length > 0, "sequence_length must be positive");
  const std::uint64_t window = static_cast<std::uint64_t>(
      config.max_target_sequence_length.value_or(config.sequence_length));
  const std::uint64_t per_window = window / static_cast<std::uint64_t>(config.sequence_length);
  offsets_.push_back(0);
  for (const auto& src : config.sources) {
    for (const auto& path : src.files) {
      TANDEM_CHECK(std::filesystem::exists(path), "token file {} does not exist", path);
      auto f = std::make_unique<io::TokenFile>(path, config.dtype);
      TANDEM_CHECK(f->num_tokens() > 0, "token file {} is empty", path);
      std::uint64_t instances = (f->num_tokens() / window) * per_window;
      offsets_.push_back(offsets_.back() + instances);
      files_.push_back(std::move(f));
      labels_.push_back(src.label);
    }
  }
  TANDEM_CHECK(!files_.empty(), "the data config names no token files");

  std::string text = "class=NumpyFSLDataset";
  text += fmt::format("vocab_size={},", config.vocab_size);
  text += fmt::format("pad_token_id={},", config.pad_token_id);
  text += fmt::format("eos_token_id={},", config.eos_token_id);
  text += fmt::format("dtype=<class 'numpy.{}'>,", io::token_dtype_name(config.dtype));
  text += fmt::format("max_target_sequence_length={},",
                      python_optional(config.max_target_sequence_length));
  text += fmt::format("bos_token_id={},", python_optional(config.bos_token_id));
  for (std::size_t i = 0; i < files_.size(); ++i)
    text += fmt::format("path={},size={},",
                        std::filesystem::path(files_[i]->path()).filename().string(),
                        file_size_bytes(i));
  fingerprint_ = core::sha256_hex(std::string_view(text));

  if (config.validate_token_ids) validate_token_ids();
}

InstanceLocation TokenDataset::locate(std::uint64_t instance) const {
  TANDEM_CHECK(instance < num_instances(), "instance {} out of range ({} instances)", instance,
               num_instances());
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), instance);
  std::size_t file = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  return {file, instance - offsets_[file]};
}

void TokenDataset::read_instance(std::uint64_t instance, std::span<std::int64_t> out) const {
  TANDEM_CHECK(out.size() == static_cast<std::size_t>(sequence_length_),
               "read_instance: buffer of {} tokens for sequence_length {}", out.size(),
               sequence_length_);
  InstanceLocation loc = locate(instance);
  const std::uint64_t start = loc.local_index * static_cast<std::uint64_t>(sequence_length_);
  files_[loc.file]->read(start, static_cast<std::uint64_t>(sequence_length_), out.data());
  // Every id that reaches a batch is checked (validate_token_ids scans all of them up front):
  // an id past the vocabulary would index a padding row of the embedding silently.
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (static_cast<std::uint64_t>(out[i]) >= vocab_size_) {
      core::fail(
          "{}: token id {} at token offset {} is >= vocab_size {} (a corrupt or foreign token "
          "file?)",
          files_[loc.file]->path(), out[i], start + i, vocab_size_);
    }
  }
}

void TokenDataset::validate_token_ids() const {
  for (const auto& f : files_) {
    const std::uint64_t n = f->num_tokens();
    const std::uint64_t item = io::token_dtype_size(f->dtype());
    std::vector<std::int64_t> buf;
    constexpr std::uint64_t kBlock = 1 << 16;
    for (std::uint64_t start = 0; start < n; start += kBlock) {
      std::uint64_t count = std::min(kBlock, n - start);
      buf.resize(count);
      f->read(start, count, buf.data());
      for (std::uint64_t i = 0; i < count; ++i) {
        std::uint64_t id = static_cast<std::uint64_t>(buf[i]);
        TANDEM_CHECK(id < vocab_size_,
                     "{}: token id {} at token offset {} (byte offset {}) is >= vocab_size {}",
                     f->path(), id, start + i, (start + i) * item, vocab_size_);
      }
    }
  }
}

}  // namespace tandem::data
