#include "tandem/eval/padded_heldout.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "tandem/core/error.h"
#include "tandem/core/glob.h"
#include "tandem/core/ignore_index.h"
#include "tandem/data/data_mix.h"
#include "tandem/data/numpy_random.h"

namespace tandem::eval {
namespace fs = std::filesystem;

std::vector<PaddedSetConfig> discover_padded_sets(const std::string& root) {
  TANDEM_CHECK(fs::is_directory(root), "{}: held-out sets folder not found", root);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::vector<PaddedSetConfig> sets;
  for (const auto& name : names) {
    fs::path val = fs::path(root) / name / "val";
    if (!fs::is_directory(val)) continue;
    PaddedSetConfig s;
    s.label = name + "-validation";
    for (const auto& e : fs::directory_iterator(val)) {
      if (e.is_regular_file() && e.path().extension() == ".npy")
        s.files.push_back(e.path().string());
    }
    std::sort(s.files.begin(), s.files.end());
    if (!s.files.empty()) sets.push_back(std::move(s));
  }
  TANDEM_CHECK(!sets.empty(), "{}: no <set>/val/*.npy folders (AI2's layout)", root);
  return sets;
}

PaddedHeldoutConfig parse_padded_heldout_config(io::ConfigSection s, const std::string& base_dir) {
  PaddedHeldoutConfig c;
  if (s.has("mix")) {
    // OLMo-core's NumpyPaddedFSLDatasetConfig.from_data_mix: the manifest's lines in order, one
    // set per label.
    const std::string tokenizer_id = s.get_string("mix_tokenizer_id", "dolma2-tokenizer");
    const std::string mix_base = io::resolve_config_path(base_dir, s.get_string("mix_base_dir"));
    for (const auto& e : data::read_data_mix(io::resolve_config_path(base_dir, s.get_string("mix")),
                                             mix_base, tokenizer_id)) {
      auto it = std::find_if(c.sets.begin(), c.sets.end(),
                             [&](const PaddedSetConfig& p) { return p.label == e.label; });
      if (it == c.sets.end()) it = c.sets.insert(c.sets.end(), PaddedSetConfig{e.label, {}});
      it->files.push_back(e.path);
    }
  } else {
    s.mark_used("mix");
    s.mark_used("mix_base_dir");
    s.mark_used("mix_tokenizer_id");
  }
  if (s.has("root")) {
    c.sets = discover_padded_sets(io::resolve_config_path(base_dir, s.get_string("root")));
  } else {
    s.mark_used("root");
  }
  if (s.has("sets")) {
    YAML::Node sets = s.raw("sets");
    TANDEM_CHECK(sets.IsSequence(), "{} must be a list of {{label, paths}}", s.where("sets"));
    for (std::size_t i = 0; i < sets.size(); ++i) {
      io::ConfigSection set(sets[i], s.path() + ".sets[" + std::to_string(i) + "]");
      PaddedSetConfig p;
      p.label = set.get_string("label");
      for (const auto& pattern : set.get_string_list("paths")) {
        auto matched = core::expand_glob(io::resolve_config_path(base_dir, pattern));
        TANDEM_CHECK(!matched.empty(), "{}: '{}' matches no file", set.where("paths"), pattern);
        p.files.insert(p.files.end(), matched.begin(), matched.end());
      }
      set.finish();
      c.sets.push_back(std::move(p));
    }
  } else {
    s.mark_used("sets");
  }
  TANDEM_CHECK(!c.sets.empty(), "{}: give mix, root or sets", s.where(""));
  for (std::size_t i = 0; i < c.sets.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      TANDEM_CHECK(c.sets[i].label != c.sets[j].label, "{}: held-out set '{}' appears twice",
                   s.where("sets"), c.sets[i].label);
    }
  }
  c.sequence_length = s.get_int("sequence_length", 0);
  c.batch_size = s.get_int("batch_size", 0);
  c.seed = s.get_int("seed", 0);
  c.batch_instances = s.get_int("batch_instances", c.batch_instances);
  TANDEM_CHECK(c.sequence_length >= 0 && c.batch_size >= 0 && c.seed >= 0,
               "{}: sequence_length, batch_size and seed must be >= 0", s.where(""));
  TANDEM_CHECK(c.batch_instances > 0, "{} must be positive", s.where("batch_instances"));
  s.finish();
  return c;
}

data::PaddedDatasetOptions padded_dataset_options(const PaddedHeldoutConfig& config,
                                                  const data::DataConfig& train_data) {
  data::PaddedDatasetOptions o;
  o.sequence_length =
      config.sequence_length > 0 ? config.sequence_length : train_data.sequence_length;
  o.eos_token_id = train_data.eos_token_id;
  o.pad_token_id = train_data.pad_token_id;
  o.vocab_size = train_data.vocab_size;
  o.dtype = train_data.dtype;
  return o;
}

PaddedHeldout::PaddedHeldout(const PaddedHeldoutConfig& config,
                             const data::PaddedDatasetOptions& options)
    : config_(config) {
  TANDEM_CHECK(options.sequence_length > 0, "padded held-out sets: no sequence length");
  std::vector<data::PaddedFile> files;
  for (const auto& set : config.sets) {
    for (const auto& f : set.files) files.push_back({f, set.label});
  }
  dataset_ = std::make_unique<data::PaddedDataset>(files, options);
  const std::int64_t T = options.sequence_length;
  const std::int64_t batch_tokens = config.batch_size > 0 ? config.batch_size : T;
  TANDEM_CHECK(batch_tokens % T == 0,
               "evaluation.padded.batch_size ({} tokens) must be a multiple of the sequence "
               "length ({})",
               batch_tokens, T);
  // NumpyFSLDataLoader: arange(n) shuffled with seed + epoch (epoch 1), tail dropped.
  const auto per_batch = static_cast<std::uint64_t>(batch_tokens / T);
  const std::uint64_t n = dataset_->num_instances();
  order_ = data::global_instance_order(n, static_cast<std::uint64_t>(config.seed), 1, 1);
  order_.resize(per_batch * (n / per_batch));
}

std::vector<PaddedSetResult> PaddedHeldout::evaluate(model::Olmo3Model& model,
                                                     const EvalRanks& ranks) const {
  const std::int64_t T = dataset_->sequence_length();
  const std::vector<std::string> labels = dataset_->labels();
  std::map<std::string, std::vector<std::uint32_t>> by_label;
  for (std::uint32_t i : order_) by_label[dataset_->label(i)].push_back(i);

  // Every set's batches in one list (set by set), so that small sets still spread over the ranks.
  struct Slice {
    std::size_t set;
    const std::vector<std::uint32_t>* instances;
    std::size_t first;
  };
  std::vector<Slice> slices;
  std::vector<EvalBatch> batches;
  std::vector<PaddedSetResult> results(labels.size());
  for (std::size_t s = 0; s < labels.size(); ++s) {
    const auto& instances = by_label[labels[s]];
    results[s].label = labels[s];
    results[s].instances = static_cast<std::int64_t>(instances.size());
    for (std::uint32_t inst : instances) results[s].tokens += dataset_->length(inst);
    for (std::size_t first = 0; first < instances.size();
         first += static_cast<std::size_t>(config_.batch_instances)) {
      const auto B = static_cast<std::int64_t>(
          std::min<std::size_t>(config_.batch_instances, instances.size() - first));
      slices.push_back({s, &instances, first});
      batches.push_back({B, T, 1});
    }
  }
  auto run_batch = [&](std::size_t k) {
    const std::int64_t B = batches[k].rows;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T), 0);
    std::vector<std::int64_t> targets(static_cast<std::size_t>(B * T), core::kIgnoreIndex);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(T));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::uint32_t inst =
          (*slices[k].instances)[slices[k].first + static_cast<std::size_t>(b)];
      std::span<std::int64_t> row(ids.data() + b * T, static_cast<std::size_t>(T));
      dataset_->read_instance(inst, row, mask);
      // get_labels: ids shifted left, positions whose next token is outside the label mask
      // ignored; the weight is the whole label mask (OLMo-core masks input positions).
      for (std::int64_t t = 0; t + 1 < T; ++t) {
        if (mask[static_cast<std::size_t>(t + 1)]) targets[b * T + t] = row[t + 1];
      }
    }
    return std::vector<double>{
        model.forward_backward(ids.data(), targets.data(), B, T, 0.0f, 1.0f, false).ce_sum};
  };
  const std::vector<std::vector<double>> ce = ranks.run(model, batches, run_batch);
  std::vector<double> ce_sum(labels.size(), 0.0);
  for (std::size_t k = 0; k < batches.size(); ++k) ce_sum[slices[k].set] += ce[k][0];
  for (std::size_t s = 0; s < labels.size(); ++s) {
    PaddedSetResult& r = results[s];
    // OLMo-core's MeanMetric: NaN for a set the loader never reached (0 / 0).
    r.loss = r.tokens > 0 ? ce_sum[s] / static_cast<double>(r.tokens) : std::nan("");
    r.perplexity = std::exp(r.loss);
  }
  return results;
}

}  // namespace tandem::eval
