// The `data:` mapping of a run config (tandem data commands read it from a config file; the
// trainer embeds the same mapping in its run config). Keys follow OLMo-core's
// NumpyFSLDatasetConfig / NumpyDataLoaderConfig names; docs/data-pipeline.md lists them all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/document_packing.h"
#include "tandem/data/repetition_filter.h"
#include "tandem/data/source_mixture.h"
#include "tandem/io/config.h"
#include "tandem/io/token_file.h"

namespace tandem::data {

// One labelled source of a mix: its files after glob expansion, in mix order.
struct DataSource {
  std::string label;
  std::vector<std::string> patterns;  // as written (relative ones resolved against the config)
  std::vector<std::string> files;     // expanded, sorted per pattern (OLMo-core sorts globs)
};

// `dataset: packed`: OLMo-core's NumpyPackedFSLDataset (data/document_packing.h) instead of
// NumpyFSLDataset's fixed windows.
struct PackingConfig {
  LongDocStrategy long_doc_strategy = LongDocStrategy::kTruncate;
  std::int64_t source_group_size = 1;  // consecutive files (in mix order) packed together
  // OLMo-core's use_array_if_local: false takes the document boundaries from each token file's
  // metadata (<name>.csv.gz: "start,end,..." per document) instead of scanning for EOS; true and
  // unset scan. Set or not, it is part of the fingerprint and the cache names when given.
  std::optional<bool> use_array_if_local;
  bool documents_from_metadata() const { return use_array_if_local == false; }
};

struct DataConfig {
  std::vector<DataSource> sources;
  std::string mix;  // the OLMo-core mix manifest the sources came from, if any
  // OLMo-core's source_mixture_config (NumpyFSLDatasetMixture): the sources, one per mixture
  // source, hold its file entries (a file repeated when upsampled), and file_token_limits how many
  // tokens of each entry the dataset reads (from the file's start), aligned with all_files().
  std::optional<SourceMixtureConfig> source_mixture;
  std::optional<MixtureOutcome> mixture_outcome;
  std::vector<std::uint64_t> file_token_limits;
  // OLMo-core's label_mask_paths: one numpy bool file per token file (same token count), aligned
  // with all_files(); a 0 byte masks that token's label. Empty: every label counts.
  std::vector<std::string> label_mask_files;
  // OLMo-core's source_permutation_seed: the files (with their labels and masks) in the order
  // Python's random.Random(seed).shuffle leaves them; `sources` is then regrouped by label runs.
  std::optional<std::int64_t> source_permutation_seed;
  std::int64_t sequence_length = 0;
  std::optional<std::int64_t> max_target_sequence_length;
  std::optional<PackingConfig> packing;  // set: documents packed into padded instances
  // OLMo-core's work_dir: where dataset: packed keeps (and finds) its packing cache, in OLMo-core's
  // format (data/packing_cache.h). Empty: pack in memory at every start.
  std::string work_dir;
  std::int64_t global_batch_size = 0;  // tokens, as in OLMo-core
  std::int64_t seed = 0;
  std::int64_t vocab_size = 0;
  io::TokenDtype dtype = io::TokenDtype::kU32;
  std::int64_t eos_token_id = 0;
  std::int64_t pad_token_id = 0;
  std::optional<std::int64_t> bos_token_id;
  bool shuffle = true;
  std::optional<RepetitionFilterConfig> instance_filter;
  bool ignore_fingerprint_mismatch = false;
  bool validate_token_ids = false;  // scan every file for ids >= vocab_size when opening
  // OLMo-core's intra-document masking: each instance's documents (ending at eos_token_id, or at
  // EOS followed by bos_token_id when set) attend only within themselves (model/documents.h).
  bool generate_doc_lengths = false;
  std::int64_t micro_batch_size = 0;  // instances per micro-batch; 0 = the whole rank batch
  std::int64_t prefetch_batches = 2;

  std::vector<std::string> all_files() const;  // every file, in mix order
  std::int64_t instances_per_batch() const { return global_batch_size / sequence_length; }
  // Instances per chunk of the shuffle (max_target_sequence_length / sequence_length, else 1).
  std::int64_t chunk_size() const;
};

// Reads and checks a `data:` mapping. Relative paths and globs are resolved against base_dir
// (the directory of the config file). Unknown keys, missing files and empty globs are errors
// naming the key.
DataConfig parse_data_config(io::ConfigSection section, const std::string& base_dir = "");

// Convenience for the CLI and tests: loads `path` (with key=value overrides) and parses its
// top-level `data:` mapping; other top-level keys are left to their owners.
DataConfig load_data_config(const std::string& path,
                            const std::vector<std::string>& overrides = {});

}  // namespace tandem::data
