// OLMo-core's fine-grained source mixtures (SourceMixtureDatasetConfig -> NumpyFSLDatasetMixture):
// each source contributes a target share of a requested token budget, taken from the start of
// each of its files (repeated when the source must be upsampled), rounded to whole instances so
// that the budget fills whole training steps. The dataset then cuts each (file, allocation) entry
// into fixed windows as NumpyFSLDataset does, reading only the first `tokens` of the file.
//
// The arithmetic is OLMo-core's, in the same floating-point steps (Python floats are doubles):
//   needed   = int(requested_tokens * target_ratio)
//   capacity = int(population * max_source_fraction * max_repetition_ratio) >= needed, else error
//   per file = ceil(file_tokens * r) for r = needed / population (r > 1: chunks of 1.0 and the
//              rest, the file list repeated per chunk)
//   whole instances per file entry (at most file_tokens / seq), then Hamilton's method up to
//   ceil(requested_tokens / global_batch_size) * instances_per_batch: an even share of what is
//   missing to every entry with room, then one more each by largest remainder (ties: the later
//   entry first); entries left with no tokens are dropped.
// OLMo-core's mixture `seed` only samples an index file its reader never uses: it cannot change
// the instances, so the config reader accepts it and nothing uses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

struct MixtureSource {
  std::string name;                 // OLMo-core's source_name
  double target_ratio = 0;          // share of requested_tokens, in [0, 1]; all sum to 1
  std::vector<std::string> files;   // globs expanded (sorted per pattern)
  double max_repetition_ratio = 1;  // >= 1: how many times its tokens may be used
  double max_source_fraction = 1;   // in [0, 1]: the part of its tokens that may be used
};

struct SourceMixtureConfig {
  std::vector<MixtureSource> sources;
  std::int64_t requested_tokens = 0;
  std::int64_t global_batch_size = 0;  // tokens; the data loader's unless given
};

// One entry of the mixture's file list: the first `tokens` tokens of `path`.
struct MixtureEntry {
  std::string path;
  std::string source;
  std::uint64_t tokens = 0;
};

struct MixtureSourceOutcome {
  std::string name;
  double target_ratio = 0;
  std::uint64_t population = 0;  // tokens in its files
  std::uint64_t needed = 0;      // int(requested_tokens * target_ratio)
  std::uint64_t selected = 0;    // after rounding to whole instances
};

struct MixtureOutcome {
  std::vector<MixtureEntry> entries;  // in order, entries with no tokens dropped
  std::vector<MixtureSourceOutcome> sources;
  std::uint64_t requested_instances = 0;
  std::uint64_t total_tokens() const;
};

// Validates the config as OLMo-core does (errors name `where` and the source) and computes the
// allocation; a file holds (its size / dtype_size) tokens, as OLMo-core counts them.
MixtureOutcome build_source_mixture(const SourceMixtureConfig& config, std::int64_t sequence_length,
                                    std::size_t dtype_size, const std::string& where);

}  // namespace tandem::data
