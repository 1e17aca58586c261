#include "tandem/data/data_config.h"

#include <algorithm>
#include <filesystem>

#include "tandem/core/error.h"
#include "tandem/core/glob.h"
#include "tandem/data/data_mix.h"
#include "tandem/data/python_random.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> expand(const std::string& pattern, const std::string& where) {
  TANDEM_CHECK(pattern.find("**") == std::string::npos,
               "{}: '**' patterns are not supported ('{}'); list the directories", where, pattern);
  if (!core::has_wildcard(pattern)) {
    std::error_code ec;
    TANDEM_CHECK(fs::is_regular_file(pattern, ec), "{}: token file {} does not exist", where,
                 pattern);
    return {pattern};
  }
  std::vector<std::string> out = core::expand_glob(pattern);  // sorted, like Python's sorted()
  TANDEM_CHECK(!out.empty(), "{}: pattern '{}' did not match any files", where, pattern);
  return out;
}

// OLMo-core's `mix`: the manifest's files in its order, one source per run of equal labels.
std::vector<DataSource> mix_sources(io::ConfigSection& s, const std::string& manifest,
                                    const std::string& base_dir) {
  TANDEM_CHECK(s.has("mix_base_dir"), "{}: a data mix needs mix_base_dir (OLMo-core's name)",
               s.where("mix"));
  const std::string mix_base = io::resolve_config_path(base_dir, s.get_string("mix_base_dir"));
  TANDEM_CHECK(mix_base.find("://") == std::string::npos,
               "{}: '{}' is remote; tandem reads local token files (copy the mix's files and "
               "point mix_base_dir at the copy)",
               s.where("mix_base_dir"), mix_base);
  TANDEM_CHECK(s.has("mix_tokenizer_id"),
               "{}: a data mix needs mix_tokenizer_id, the text that replaces {{TOKENIZER}} in "
               "its paths (AI2's OLMo 3 mixes: allenai/dolma3-tokenizer)",
               s.where("mix"));
  const std::string tokenizer_id = s.get_string("mix_tokenizer_id");
  std::vector<DataSource> out;
  for (const MixEntry& e : read_data_mix(manifest, mix_base, tokenizer_id)) {
    std::error_code ec;
    TANDEM_CHECK(fs::is_regular_file(e.path, ec), "{} line {}: token file {} does not exist",
                 manifest, e.line, e.path);
    if (out.empty() || out.back().label != e.label) out.push_back({e.label, {}, {}});
    out.back().patterns.push_back(e.path);
    out.back().files.push_back(e.path);
  }
  return out;
}

// OLMo-core's _resolve_paths_metadata: paths, their labels and label masks shuffled together.
void permute_sources(DataConfig& c, std::int64_t seed) {
  std::vector<std::string> files, labels;
  for (const auto& src : c.sources) {
    files.insert(files.end(), src.files.begin(), src.files.end());
    labels.insert(labels.end(), src.files.size(), src.label);
  }
  TANDEM_CHECK(files.size() < (std::size_t{1} << 32), "too many token files to permute");
  const std::uint64_t abs_seed =
      seed < 0 ? 0 - static_cast<std::uint64_t>(seed) : static_cast<std::uint64_t>(seed);
  const std::vector<std::size_t> order = PythonRandom(abs_seed).shuffled_range(files.size());
  std::vector<std::string> masks;
  c.sources.clear();
  for (std::size_t i : order) {
    if (c.sources.empty() || c.sources.back().label != labels[i])
      c.sources.push_back({labels[i], {}, {}});
    c.sources.back().patterns.push_back(files[i]);
    c.sources.back().files.push_back(files[i]);
    if (!c.label_mask_files.empty()) masks.push_back(c.label_mask_files[i]);
  }
  c.label_mask_files = std::move(masks);
}

void check_positive(std::int64_t v, const std::string& where) {
  TANDEM_CHECK(v > 0, "{} must be positive, got {}", where, v);
}

// OLMo-core's SourceMixtureDatasetConfig (source_list.sources, requested_tokens, seed; its
// global_batch_size defaults to the loader's here; processes, render_tables and quiet only
// change its logging). Globs expanded as OLMo-core's resolved_paths.
SourceMixtureConfig parse_source_mixture(io::ConfigSection m, const std::string& base_dir) {
  SourceMixtureConfig c;
  c.requested_tokens = m.get_int("requested_tokens");
  c.global_batch_size = m.get_int("global_batch_size", 0);
  (void)m.get_int("seed", 42);  // typed, then unused (source_mixture.h)
  for (const char* unused : {"processes", "render_tables", "quiet"}) m.mark_used(unused);
  YAML::Node list = m.raw("sources");
  TANDEM_CHECK(list.IsSequence() && list.size() > 0,
               "{}: expected a non-empty list of {{source_name, target_ratio, paths}}",
               m.where("sources"));
  for (std::size_t i = 0; i < list.size(); ++i) {
    io::ConfigSection item(list[i], m.path() + ".sources[" + std::to_string(i) + "]");
    MixtureSource src;
    src.name = item.get_string("source_name");
    src.target_ratio = item.get_double("target_ratio");
    src.max_repetition_ratio = item.get_double("max_repetition_ratio", 1.0);
    src.max_source_fraction = item.get_double("max_source_fraction", 1.0);
    for (std::string p : item.get_string_list("paths")) {
      p = io::resolve_config_path(base_dir, p);
      auto files = expand(p, item.where("paths"));
      src.files.insert(src.files.end(), files.begin(), files.end());
    }
    item.finish();
    c.sources.push_back(std::move(src));
  }
  m.finish();
  return c;
}

// The mixture's entries as sources (one per run of a source name) and per-file token limits.
void apply_source_mixture(DataConfig& c, const std::string& where) {
  SourceMixtureConfig& m = *c.source_mixture;
  if (m.global_batch_size == 0) m.global_batch_size = c.global_batch_size;
  c.mixture_outcome =
      build_source_mixture(m, c.sequence_length, io::token_dtype_size(c.dtype), where);
  c.sources.clear();
  for (const MixtureEntry& e : c.mixture_outcome->entries) {
    if (c.sources.empty() || c.sources.back().label != e.source)
      c.sources.push_back({e.source, {}, {}});
    c.sources.back().patterns.push_back(e.path);
    c.sources.back().files.push_back(e.path);
    c.file_token_limits.push_back(e.tokens);
  }
}

}  // namespace

std::vector<std::string> DataConfig::all_files() const {
  std::vector<std::string> out;
  for (const auto& s : sources) out.insert(out.end(), s.files.begin(), s.files.end());
  return out;
}

std::int64_t DataConfig::chunk_size() const {
  return max_target_sequence_length ? *max_target_sequence_length / sequence_length : 1;
}

DataConfig parse_data_config(io::ConfigSection s, const std::string& base_dir) {
  DataConfig c;
  // Sources: `paths` (one unlabelled source), `sources: [{label, paths}]`, an OLMo-core `mix` or
  // an OLMo-core `source_mixture`.
  TANDEM_CHECK(int(s.has("paths")) + int(s.has("sources")) + int(s.has("mix")) +
                       int(s.has("source_mixture")) ==
                   1,
               "{}: give exactly one of 'paths', 'sources', 'mix' or 'source_mixture'",
               s.where(""));
  if (s.has("source_mixture")) {
    c.source_mixture = parse_source_mixture(s.section("source_mixture"), base_dir);
    // OLMo-core: "'label_mask_paths' is not supported alongside 'source_mixture_config'"; its
    // mixture never reads a permutation seed (tandem refuses what would be ignored).
    for (const char* key : {"label_mask_paths", "source_permutation_seed"})
      TANDEM_CHECK(!s.has(key), "{} is not supported alongside source_mixture", s.where(key));
  } else if (s.has("mix")) {
    c.mix = io::resolve_config_path(base_dir, s.get_string("mix"));
    c.sources = mix_sources(s, c.mix, base_dir);
  } else if (s.has("paths")) {
    DataSource src;
    src.label = "default";
    src.patterns = s.get_string_list("paths");
    c.sources.push_back(src);
  } else {
    YAML::Node list = s.raw("sources");
    TANDEM_CHECK(list.IsSequence() && list.size() > 0,
                 "{}: expected a non-empty list of {{label, paths}}", s.where("sources"));
    for (std::size_t i = 0; i < list.size(); ++i) {
      io::ConfigSection item(list[i], s.path() + ".sources[" + std::to_string(i) + "]");
      DataSource src;
      src.label = item.get_string("label", "source" + std::to_string(i));
      src.patterns = item.get_string_list("paths");
      item.finish();
      c.sources.push_back(src);
    }
  }
  // Globs are expanded for `paths` and `sources`; a mix names files (checked in mix_sources).
  for (auto& src : c.sources) {
    if (!c.mix.empty()) break;  // (a source_mixture has no sources yet)
    TANDEM_CHECK(!src.patterns.empty(), "{}: source '{}' has no paths", s.where("paths"),
                 src.label);
    for (auto& p : src.patterns) {
      p = io::resolve_config_path(base_dir, p);
      auto files = expand(p, s.where(s.has("paths") ? "paths" : "sources"));
      src.files.insert(src.files.end(), files.begin(), files.end());
    }
  }

  if (s.has("label_mask_paths")) {
    for (std::string p : s.get_string_list("label_mask_paths")) {
      p = io::resolve_config_path(base_dir, p);
      auto masks = expand(p, s.where("label_mask_paths"));
      c.label_mask_files.insert(c.label_mask_files.end(), masks.begin(), masks.end());
    }
    const std::size_t files = c.all_files().size();
    TANDEM_CHECK(c.label_mask_files.size() == files,
                 "{}: {} label mask files for {} token files (OLMo-core needs one per file)",
                 s.where("label_mask_paths"), c.label_mask_files.size(), files);
  }
  c.source_permutation_seed = s.get_optional_int("source_permutation_seed");
  if (c.source_permutation_seed) permute_sources(c, *c.source_permutation_seed);

  c.sequence_length = s.get_int("sequence_length");
  check_positive(c.sequence_length, s.where("sequence_length"));
  c.max_target_sequence_length = s.get_optional_int("max_target_sequence_length");
  if (c.max_target_sequence_length) {
    auto m = *c.max_target_sequence_length;
    TANDEM_CHECK(m >= c.sequence_length && m % c.sequence_length == 0,
                 "{} ({}) must be a multiple of sequence_length ({})",
                 s.where("max_target_sequence_length"), m, c.sequence_length);
  }
  const std::string dataset = s.get_string("dataset", "fsl");
  TANDEM_CHECK(dataset == "fsl" || dataset == "packed",
               "{}: '{}' is not one of fsl (OLMo-core's NumpyFSLDataset), packed "
               "(NumpyPackedFSLDataset)",
               s.where("dataset"), dataset);
  if (dataset == "packed") {
    TANDEM_CHECK(!c.source_mixture,
                 "{}: dataset: packed takes no source_mixture (OLMo-core mixes sources only for "
                 "fixed windows, NumpyFSLDatasetMixture)",
                 s.where("source_mixture"));
    PackingConfig p;
    p.long_doc_strategy =
        long_doc_strategy_from_name(s.get_string("long_doc_strategy", "truncate"));
    p.source_group_size = s.get_int("source_group_size", 1);
    check_positive(p.source_group_size, s.where("source_group_size"));
    if (s.has("use_array_if_local") && !s.raw("use_array_if_local").IsNull())
      p.use_array_if_local = s.get_bool("use_array_if_local", true);
    else
      s.mark_used("use_array_if_local");
    // OLMo-core's OBFD keeps a segment tree over the possible room left, built only for powers
    // of two; its packed dataset has no max_target_sequence_length.
    const std::int64_t T = c.sequence_length;
    TANDEM_CHECK((T & (T - 1)) == 0,
                 "{} ({}) must be a power of two for dataset: packed (OLMo-core's packer "
                 "requires it)",
                 s.where("sequence_length"), T);
    TANDEM_CHECK(!c.max_target_sequence_length, "{}: not an option of dataset: packed",
                 s.where("max_target_sequence_length"));
    c.packing = p;
    if (s.has("work_dir")) c.work_dir = io::resolve_config_path(base_dir, s.get_string("work_dir"));
  } else {
    for (const char* key :
         {"long_doc_strategy", "source_group_size", "work_dir", "use_array_if_local"})
      TANDEM_CHECK(!s.has(key), "{} applies to dataset: packed only", s.where(key));
  }
  // Buffers of global_batch_size tokens are allocated per batch: bound it (and the sequence
  // length) far above any real recipe but below what would overflow or exhaust memory.
  TANDEM_CHECK(c.sequence_length <= (std::int64_t{1} << 24), "{} ({}) is above the limit of 2^24",
               s.where("sequence_length"), c.sequence_length);
  c.global_batch_size = s.get_int("global_batch_size");
  check_positive(c.global_batch_size, s.where("global_batch_size"));
  TANDEM_CHECK(c.global_batch_size <= (std::int64_t{1} << 32),
               "{} ({} tokens) is above the limit of 2^32", s.where("global_batch_size"),
               c.global_batch_size);
  TANDEM_CHECK(c.global_batch_size % c.sequence_length == 0,
               "{} ({} tokens) must be a multiple of sequence_length ({})",
               s.where("global_batch_size"), c.global_batch_size, c.sequence_length);
  c.seed = s.get_int("seed");
  TANDEM_CHECK(c.seed >= 0, "{} must be non-negative", s.where("seed"));
  c.vocab_size = s.get_int("vocab_size");
  check_positive(c.vocab_size, s.where("vocab_size"));
  c.dtype = s.has("dtype") ? io::token_dtype_from_name(s.get_string("dtype"))
                           : io::token_dtype_for_vocab(static_cast<std::uint64_t>(c.vocab_size));
  // A dtype too narrow for the vocabulary would read another file's ids as garbage.
  const io::TokenDtype needed = io::token_dtype_for_vocab(static_cast<std::uint64_t>(c.vocab_size));
  TANDEM_CHECK(io::token_dtype_size(c.dtype) >= io::token_dtype_size(needed),
               "{}: {} cannot hold the ids of vocab_size {} (needs {})", s.where("dtype"),
               io::token_dtype_name(c.dtype), c.vocab_size, io::token_dtype_name(needed));
  s.mark_used("dtype");
  if (c.source_mixture) apply_source_mixture(c, s.where("source_mixture"));
  c.eos_token_id = s.get_int("eos_token_id");
  c.pad_token_id = s.get_int("pad_token_id");
  c.bos_token_id = s.get_optional_int("bos_token_id");
  c.shuffle = s.get_bool("shuffle", true);
  if (s.has("instance_filter_config")) {
    io::ConfigSection f = s.section("instance_filter_config");
    RepetitionFilterConfig rf;
    rf.max_period = f.get_int("repetition_max_period", rf.max_period);
    rf.min_period = f.get_int("repetition_min_period", rf.min_period);
    rf.max_count = f.get_int("repetition_max_count", rf.max_count);
    f.finish();
    check_positive(rf.min_period, f.where("repetition_min_period"));
    check_positive(rf.max_count, f.where("repetition_max_count"));
    c.instance_filter = rf;
  } else {
    s.mark_used("instance_filter_config");
  }
  c.ignore_fingerprint_mismatch = s.get_bool("ignore_fingerprint_mismatch", false);
  c.validate_token_ids = s.get_bool("validate_token_ids", false);
  c.generate_doc_lengths = s.get_bool("generate_doc_lengths", false);
  c.micro_batch_size = s.get_int("micro_batch_size", 0);
  TANDEM_CHECK(c.micro_batch_size >= 0, "{} must be >= 0", s.where("micro_batch_size"));
  c.prefetch_batches = s.get_int("prefetch_batches", 2);
  check_positive(c.prefetch_batches, s.where("prefetch_batches"));
  s.finish();
  return c;
}

DataConfig load_data_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = io::load_yaml_config(path, overrides);
  TANDEM_CHECK(root["data"] && root["data"].IsMap(), "{}: expected a top-level 'data:' mapping",
               path);
  std::string base = fs::path(path).parent_path().string();
  return parse_data_config(io::ConfigSection(root["data"], "data", path), base);
}

}  // namespace tandem::data
