#include "tandem/data/padded_dataset.h"

#include <algorithm>
#include <filesystem>

#include "tandem/core/error.h"

namespace tandem::data {

PaddedDataset::PaddedDataset(const std::vector<PaddedFile>& files,
                             const PaddedDatasetOptions& options)
    : options_(options) {
  TANDEM_CHECK(options.sequence_length > 0, "padded dataset: sequence_length must be positive");
  TANDEM_CHECK(!files.empty(), "padded dataset: no files");
  const auto eos = static_cast<std::uint64_t>(options.eos_token_id);
  const auto max_len = static_cast<std::uint64_t>(options.sequence_length);
  for (const auto& f : files) {
    TANDEM_CHECK(std::filesystem::exists(f.path), "{} (held-out set '{}'): no such file", f.path,
                 f.label);
    files_.push_back(std::make_unique<io::TokenFile>(f.path, options.dtype));
    file_labels_.push_back(f.label);
    const io::TokenFile& tf = *files_.back();
    const auto file_index = static_cast<std::uint32_t>(files_.size() - 1);
    const std::uint64_t n = tf.num_tokens();
    std::uint64_t doc_start = 0;
    std::size_t before = instances_.size();
    tf.for_each_chunk([&](std::uint64_t base, std::span<const std::int64_t> chunk) {
      for (std::uint64_t i = 0; i < chunk.size(); ++i) {
        const auto token = static_cast<std::uint64_t>(chunk[i]);
        TANDEM_CHECK(
            options.vocab_size <= 0 || token < static_cast<std::uint64_t>(options.vocab_size),
            "{}: token {} at offset {} is outside the vocabulary ({})", f.path, token, base + i,
            options.vocab_size);
        if (token != eos) continue;
        const std::uint64_t end = base + i + 1;  // the EOS belongs to its document
        instances_.push_back({file_index, doc_start,
                              static_cast<std::uint32_t>(std::min(end - doc_start, max_len))});
        doc_start = end;
      }
    });
    TANDEM_CHECK(instances_.size() > before, "{}: no document (no EOS token {}) in {} tokens",
                 f.path, eos, n);
  }
}

const std::string& PaddedDataset::label(std::uint64_t instance) const {
  return file_labels_.at(instances_.at(instance).file);
}

std::int64_t PaddedDataset::length(std::uint64_t instance) const {
  return instances_.at(instance).length;
}

void PaddedDataset::read_instance(std::uint64_t instance, std::span<std::int64_t> ids,
                                  std::span<std::uint8_t> label_mask) const {
  TANDEM_CHECK(instance < instances_.size(), "padded dataset: instance {} of {}", instance,
               instances_.size());
  TANDEM_CHECK(static_cast<std::int64_t>(ids.size()) == options_.sequence_length,
               "padded dataset: buffer of {} for sequence length {}", ids.size(),
               options_.sequence_length);
  const Instance& in = instances_[instance];
  files_[in.file]->read(in.start, in.length, ids.data());
  std::fill(ids.begin() + in.length, ids.end(), options_.pad_token_id);
  if (!label_mask.empty()) {
    std::fill(label_mask.begin(), label_mask.begin() + in.length, 1);
    std::fill(label_mask.begin() + in.length, label_mask.end(), 0);
  }
}

std::vector<std::string> PaddedDataset::labels() const {
  std::vector<std::string> out;
  for (const auto& l : file_labels_) {
    if (std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  }
  return out;
}

}  // namespace tandem::data
