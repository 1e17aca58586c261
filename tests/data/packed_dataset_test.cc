// dataset: packed against OLMo-core's NumpyPackedFSLDataset (tests/fixtures/data/packed/, from
// tools/make_packed_fixtures.py): with OLMo-core's sort made stable, every instance's tokens,
// label mask and doc_lens, the fingerprint and the loader's global order are OLMo-core's; with
// numpy's default sort, every instance holds the same document lengths. Then the packer against
// a brute-force best fit, document boundaries across read chunks, labels, and bad configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include <zlib.h>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/document_packing.h"
#include "tandem/data/loader.h"
#include "tandem/data/packing_cache.h"
#include "tandem/data/python_random.h"
#include "tandem/model/documents.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem::data {
namespace {

std::string packed_fixture(const std::string& name) { return testing::fixture("packed/" + name); }

std::string quoted_list(const nlohmann::json& names) {
  std::string out = "[";
  for (const auto& f : names) out += "\"" + packed_fixture(f.get<std::string>()) + "\", ";
  return out + "]";
}

// The fixture's files as OLMo-core resolved them or, for cases built through OLMo-core's config,
// its globs, label-mask globs and source_permutation_seed, which tandem resolves itself.
std::string data_config_yaml(const nlohmann::json& c, bool packed) {
  std::string yaml = packed ? "data:\n  dataset: packed\n" : "data:\n";
  if (c.contains("file_patterns")) {
    yaml += "  paths: " + quoted_list(c["file_patterns"]) + "\n";
    if (!c["label_mask_patterns"].is_null())
      yaml += "  label_mask_paths: " + quoted_list(c["label_mask_patterns"]) + "\n";
    yaml += "  source_permutation_seed: " +
            std::to_string(c["source_permutation_seed"].get<std::int64_t>()) + "\n";
  } else {
    yaml += "  paths: " + quoted_list(c["files"]) + "\n";
  }
  yaml += "  sequence_length: " + std::to_string(c["sequence_length"].get<int>()) + "\n";
  yaml += "  global_batch_size: " + std::to_string(c["global_batch_size"].get<int>()) + "\n";
  yaml += "  seed: " + std::to_string(c["seed"].get<int>()) + "\n";
  yaml += "  vocab_size: " + std::to_string(c["vocab_size"].get<int>()) + "\n";
  yaml += "  dtype: " + c["dtype"].get<std::string>() + "\n";
  yaml += "  eos_token_id: " + std::to_string(c["eos_token_id"].get<int>()) + "\n";
  yaml += "  pad_token_id: " + std::to_string(c["pad_token_id"].get<int>()) + "\n";
  if (!c["bos_token_id"].is_null())
    yaml += "  bos_token_id: " + std::to_string(c["bos_token_id"].get<int>()) + "\n";
  if (packed) {
    yaml += "  long_doc_strategy: " + c["long_doc_strategy"].get<std::string>() + "\n";
    yaml += "  source_group_size: " + std::to_string(c["source_group_size"].get<int>()) + "\n";
  }
  return yaml;
}

std::string packed_config_yaml(const nlohmann::json& c) { return data_config_yaml(c, true); }

// The files tandem resolved are the ones OLMo-core resolved, in its order, masks alongside.
void expect_resolved_files(const DataConfig& config, const nlohmann::json& c) {
  std::vector<std::string> want, want_masks;
  for (const auto& f : c["files"]) want.push_back(packed_fixture(f.get<std::string>()));
  EXPECT_EQ(config.all_files(), want);
  if (c.contains("label_mask_files") && !c["label_mask_files"].is_null())
    for (const auto& f : c["label_mask_files"]) want_masks.push_back(packed_fixture(f));
  EXPECT_EQ(config.label_mask_files, want_masks);
}

std::string mask_text(std::span<const std::uint8_t> mask) {
  std::string out;
  for (std::uint8_t m : mask) out += m ? '1' : '0';
  return out;
}

// Every instance of `dataset` is the fixture's: tokens, label mask, the packer's document lengths,
// and doc_lens (the loader's documents for metadata boundaries, else a scan of the row).
void expect_instances(const TokenDataset& dataset, const DataConfig& config,
                      const nlohmann::json& instances) {
  const auto T = static_cast<std::size_t>(config.sequence_length);
  std::vector<std::int64_t> ids(T), starts(T);
  std::vector<std::uint8_t> mask(T);
  for (std::uint64_t i = 0; i < dataset.num_instances(); ++i) {
    const auto& w = instances[i];
    dataset.read_instance(i, ids, mask);
    ASSERT_EQ(ids, w["input_ids"].get<std::vector<std::int64_t>>()) << "instance " << i;
    EXPECT_EQ(mask_text(mask), w["label_mask"].get<std::string>()) << "instance " << i;
    EXPECT_EQ(dataset.document_lengths(i), w["document_lengths"].get<std::vector<std::int64_t>>())
        << "instance " << i;
    if (dataset.documents_from_metadata())
      dataset.document_starts(i, starts);
    else
      starts = model::document_starts(ids.data(), 1, std::int64_t(T), config.eos_token_id,
                                      config.bos_token_id);
    EXPECT_EQ(model::document_lengths(starts, 0, std::int64_t(T)),
              w["doc_lens"].get<std::vector<std::int64_t>>())
        << "instance " << i;
  }
}

nlohmann::json packed_fixture_json() {
  return nlohmann::json::parse(core::read_file(packed_fixture("packed.json")));
}

nlohmann::json packed_cases() { return packed_fixture_json()["cases"]; }

TEST(PackedDatasetParity, InstancesFingerprintAndOrderAreOlmoCoresUnderAStableSort) {
  const nlohmann::json cases = packed_cases();
  ASSERT_GE(cases.size(), 4u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const DataConfig config = testing::parse_yaml(packed_config_yaml(c));
    expect_resolved_files(config, c);
    auto dataset = std::make_shared<const TokenDataset>(config);
    const auto& want = c["stable"];
    ASSERT_TRUE(dataset->packed());
    ASSERT_EQ(dataset->num_instances(), want["num_instances"].get<std::uint64_t>());
    EXPECT_EQ(dataset->fingerprint(), want["fingerprint"].get<std::string>());
    expect_instances(*dataset, config, want["instances"]);
    Loader loader(config, dataset, {.prefetch = false});
    auto order = loader.plan(1)->global_order();
    EXPECT_EQ(std::vector<std::uint64_t>(order.begin(), order.end()),
              want["global_indices_epoch1"].get<std::vector<std::uint64_t>>());
  }
}

TEST(PackedDatasetParity, InstancesHoldOlmoCoresDocumentLengthsUnderNumpysDefaultSort) {
  std::size_t differing = 0;
  for (const auto& c : packed_cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const TokenDataset dataset(testing::parse_yaml(packed_config_yaml(c)));
    const auto& want = c["default"];
    ASSERT_EQ(dataset.num_instances(), want["num_instances"].get<std::uint64_t>());
    for (std::uint64_t i = 0; i < dataset.num_instances(); ++i)
      EXPECT_EQ(dataset.document_lengths(i),
                want["document_lengths"][i].get<std::vector<std::int64_t>>())
          << "instance " << i;
    differing += want["input_ids_differ_from_stable"].get<bool>();
  }
  // Why the stable sort is the reference: OLMo-core's own default order exchanged equal-length
  // documents in the fixtures' cases.
  EXPECT_GT(differing, 0u);
}

// label_mask_paths on fixed windows, with the files permuted by source_permutation_seed.
TEST(PackedDatasetParity, FixedWindowsCarryTheirLabelMaskFilesAsOlmoCore) {
  const nlohmann::json cases = packed_fixture_json()["fsl_cases"];
  ASSERT_GE(cases.size(), 1u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const DataConfig config = testing::parse_yaml(data_config_yaml(c, false));
    expect_resolved_files(config, c);
    auto dataset = std::make_shared<const TokenDataset>(config);
    ASSERT_FALSE(dataset->packed());
    ASSERT_TRUE(dataset->has_label_masks());
    ASSERT_EQ(dataset->num_instances(), c["num_instances"].get<std::uint64_t>());
    EXPECT_EQ(dataset->fingerprint(), c["fingerprint"].get<std::string>());
    const auto T = static_cast<std::size_t>(config.sequence_length);
    std::vector<std::int64_t> ids(T);
    std::vector<std::uint8_t> mask(T);
    for (std::uint64_t i = 0; i < dataset->num_instances(); ++i) {
      dataset->read_instance(i, ids, mask);
      ASSERT_EQ(ids, c["instances"][i]["input_ids"].get<std::vector<std::int64_t>>()) << i;
      ASSERT_EQ(mask_text(mask), c["instances"][i]["label_mask"].get<std::string>()) << i;
    }
    Loader loader(config, dataset, {.prefetch = false});
    auto order = loader.plan(1)->global_order();
    EXPECT_EQ(std::vector<std::uint64_t>(order.begin(), order.end()),
              c["global_indices_epoch1"].get<std::vector<std::uint64_t>>());
    const Batch b = loader.next_batch(0, 1);
    ASSERT_EQ(b.label_mask.size(), b.input_ids.size());
    for (std::size_t k = 0; k < b.num_instances(); ++k)
      EXPECT_EQ(mask_text(std::span(b.label_mask).subspan(k * T, T)),
                c["instances"][b.instance_ids[k]]["label_mask"].get<std::string>());
  }
}

// CPython's random.Random(seed): getrandbits(32) and shuffle(list(range(n))), the permutation
// OLMo-core's source_permutation_seed applies.
TEST(PythonRandomParity, GetrandbitsAndShuffleAreCPythons) {
  const nlohmann::json fx = packed_fixture_json();
  ASSERT_GE(fx["getrandbits32"].size(), 3u);
  for (const auto& g : fx["getrandbits32"]) {
    PythonRandom r(g["seed"].get<std::uint64_t>());
    for (const auto& want : g["getrandbits32"])
      EXPECT_EQ(r.getrandbits(32), want.get<std::uint32_t>()) << "seed " << g["seed"];
  }
  ASSERT_GE(fx["source_permutations"].size(), 40u);
  for (const auto& p : fx["source_permutations"]) {
    const auto seed = p["seed"].get<std::uint64_t>();
    EXPECT_EQ(PythonRandom(seed).shuffled_range(p["n"].get<std::size_t>()),
              p["order"].get<std::vector<std::size_t>>())
        << "seed " << seed << " n " << p["n"];
  }
}

TEST(PackedDatasetParity, LoaderBatchesCarryTheLabelMaskAndLabelsSkipPadding) {
  const nlohmann::json c = packed_cases()[0];
  const DataConfig config = testing::parse_yaml(packed_config_yaml(c));
  Loader loader(config, LoaderOptions{.prefetch = false});
  const Batch b = loader.next_batch(0, 1);
  const auto T = static_cast<std::size_t>(config.sequence_length);
  ASSERT_EQ(b.label_mask.size(), b.input_ids.size());
  const auto labels =
      optim::make_labels(b.input_ids.data(), std::int64_t(b.num_instances()),
                         config.sequence_length, b.instance_mask.data(), b.label_mask.data());
  std::size_t padded = 0;
  for (std::size_t r = 0; r < b.num_instances(); ++r) {
    for (std::size_t t = 0; t + 1 < T; ++t) {
      const std::size_t k = r * T + t;
      // OLMo-core's get_labels: mask, then shift; a label is the next token unless it is padding.
      const std::int64_t want = b.label_mask[k + 1] ? b.input_ids[k + 1] : core::kIgnoreIndex;
      ASSERT_EQ(labels[k], want) << "row " << r << " position " << t;
      padded += b.label_mask[k + 1] == 0;
    }
    EXPECT_EQ(labels[r * T + T - 1], core::kIgnoreIndex);
  }
  EXPECT_GT(padded, 0u);  // the batch has padding to skip
  EXPECT_EQ(optim::loss_divisor(labels.data(), std::int64_t(b.num_instances()),
                                config.sequence_length, b.instance_mask.data()),
            std::count_if(labels.begin(), labels.end(),
                          [](std::int64_t l) { return l != core::kIgnoreIndex; }));
}

// Best fit decreasing, written plainly: each open instance remembers its room and when it came
// to have that room; a document goes to the least room that fits, the earliest among equals.
std::vector<std::vector<std::uint32_t>> brute_force_packing(const std::vector<std::uint32_t>& len,
                                                            std::uint64_t capacity) {
  std::vector<std::uint32_t> order(len.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return len[a] > len[b]; });
  struct Open {
    std::uint64_t room;
    std::uint64_t since;
  };
  std::vector<Open> open;
  std::vector<std::vector<std::uint32_t>> bins;
  std::uint64_t clock = 0;
  for (std::uint32_t d = 0; d < order.size(); ++d) {
    const std::uint64_t l = len[order[d]];
    std::size_t best = open.size();
    for (std::size_t b = 0; b < open.size(); ++b) {
      if (open[b].room < l) continue;
      if (best == open.size() || open[b].room < open[best].room ||
          (open[b].room == open[best].room && open[b].since < open[best].since))
        best = b;
    }
    if (best == open.size()) {
      open.push_back({capacity, 0});
      bins.emplace_back();
    }
    bins[best].push_back(d);
    open[best] = {open[best].room - l, ++clock};
  }
  return bins;
}

TEST(DocumentPacking, BestFitDecreasingAgreesWithAPlainImplementation) {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t capacity = std::uint64_t{1} << (2 + trial % 7);
    const std::size_t n = 1 + rng() % 300;
    std::vector<std::uint32_t> len(n);
    std::vector<PackedDocument> docs(n);
    for (std::size_t i = 0; i < n; ++i) {
      // Few distinct lengths: many ties, the case where the order of equals matters.
      len[i] = static_cast<std::uint32_t>(1 + rng() % std::min<std::uint64_t>(capacity, 9 + trial));
      docs[i] = {0, i * 1000, len[i]};
    }
    const PackedInstances p = pack_documents(docs, static_cast<std::int64_t>(capacity));
    const auto want = brute_force_packing(len, capacity);
    ASSERT_EQ(p.num_instances(), want.size()) << "trial " << trial;
    std::vector<std::uint32_t> seen;
    for (std::size_t b = 0; b < want.size(); ++b) {
      std::vector<std::uint32_t> got(p.members.begin() + std::ptrdiff_t(p.offsets[b]),
                                     p.members.begin() + std::ptrdiff_t(p.offsets[b + 1]));
      ASSERT_EQ(got, want[b]) << "trial " << trial << " instance " << b;
      std::uint64_t used = 0;
      for (std::uint32_t m : got) used += p.documents[m].length;
      EXPECT_LE(used, capacity);
      seen.insert(seen.end(), got.begin(), got.end());
    }
    std::sort(seen.begin(), seen.end());
    for (std::uint32_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);  // each once
    ASSERT_EQ(seen.size(), n);
  }
}

TEST(DocumentPacking, FindsBoundariesAcrossReadChunksAndCapsLongDocuments) {
  const std::string dir = testing::temp_dir("packing_bounds");
  // 200,003 tokens: documents of 1..97 tokens (EOS 7 last, BOS 5 first), so boundaries fall on
  // both sides of the 65,536-token read chunks; EOS inside documents is not a boundary with BOS.
  std::mt19937 rng(3);
  std::vector<std::uint16_t> tokens;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> want_bos, want_eos;
  while (tokens.size() < 200000) {
    const std::size_t len = 2 + rng() % 96;
    const std::uint64_t start = tokens.size();
    tokens.push_back(5);
    for (std::size_t i = 1; i + 1 < len; ++i)
      tokens.push_back(rng() % 4 == 0 ? 7 : 10 + rng() % 50);
    tokens.push_back(7);
    want_bos.push_back({start, tokens.size()});
  }
  tokens.insert(tokens.end(), {5, 11, 12});  // a tail with no boundary: dropped
  for (std::uint64_t i = 0, s = 0; i < tokens.size(); ++i)
    if (tokens[i] == 7) want_eos.push_back({s, i + 1}), s = i + 1;
  testing::write_tokens(dir + "/t.npy", tokens);
  const io::TokenFile file(dir + "/t.npy", io::TokenDtype::kU16);
  for (bool with_bos : {true, false}) {
    for (auto strategy : {LongDocStrategy::kTruncate, LongDocStrategy::kFragment}) {
      const std::uint64_t cap = 32;
      std::vector<PackedDocument> got;
      find_documents(file, 3, 7, with_bos ? std::optional<std::int64_t>(5) : std::nullopt, cap,
                     strategy, got);
      std::vector<PackedDocument> want;
      for (auto [s, e] : with_bos ? want_bos : want_eos) {
        if (strategy == LongDocStrategy::kTruncate)
          want.push_back({3, s, std::uint32_t(std::min(cap, e - s))});
        else
          for (std::uint64_t f = s; f < e; f += cap)
            want.push_back({3, f, std::uint32_t(std::min(cap, e - f))});
      }
      ASSERT_EQ(got.size(), want.size()) << with_bos << " " << long_doc_strategy_name(strategy);
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].file, want[i].file);
        ASSERT_EQ(got[i].start, want[i].start) << "document " << i;
        ASSERT_EQ(got[i].length, want[i].length) << "document " << i;
      }
    }
  }
}

TEST(DocumentPacking, BadConfigsAreRefusedNamingTheKey) {
  const std::string dir = testing::temp_dir("packing_config");
  testing::write_tokens(dir + "/t.npy", std::vector<std::uint16_t>{1, 2, 9, 3, 9});
  const std::string base =
      "data:\n  paths: [\"" + dir +
      "/t.npy\"]\n  global_batch_size: 128\n  seed: 1\n  vocab_size: 10\n  dtype: uint16\n"
      "  eos_token_id: 9\n  pad_token_id: 0\n";
  auto error_of = [&](const std::string& extra) -> std::string {
    try {
      testing::parse_yaml(base + extra);
    } catch (const core::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("  dataset: packed\n  sequence_length: 48\n").find("power of two"),
            std::string::npos);
  EXPECT_NE(error_of("  dataset: packed\n  sequence_length: 64\n  long_doc_strategy: cut\n")
                .find("not one of truncate, fragment"),
            std::string::npos);
  EXPECT_NE(error_of("  sequence_length: 64\n  source_group_size: 2\n").find("packed only"),
            std::string::npos);
  EXPECT_NE(error_of("  dataset: packed\n  sequence_length: 64\n  source_group_size: 0\n")
                .find("must be positive"),
            std::string::npos);
  EXPECT_NE(error_of("  dataset: packed\n  sequence_length: 64\n  max_target_sequence_length: "
                     "128\n")
                .find("not an option of dataset: packed"),
            std::string::npos);
  EXPECT_NE(error_of("  dataset: vsl\n  sequence_length: 64\n").find("not one of fsl"),
            std::string::npos);
  EXPECT_EQ(error_of("  dataset: packed\n  sequence_length: 64\n"), "");
  EXPECT_NE(error_of("  sequence_length: 64\n  label_mask_paths: [\"" + dir + "/t.npy\", \"" + dir +
                     "/t.npy\"]\n")
                .find("2 label mask files for 1 token files"),
            std::string::npos);
  // A mask file must hold one byte per token of its token file.
  testing::write_tokens(dir + "/short_mask.npy", std::vector<std::uint8_t>{1, 1, 0});
  const DataConfig short_mask = testing::parse_yaml(
      base + "  sequence_length: 4\n  label_mask_paths: [\"" + dir + "/short_mask.npy\"]\n");
  try {
    TokenDataset dataset(short_mask);
    ADD_FAILURE() << "a short label mask file was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 3 entries for the 5 tokens"), std::string::npos)
        << e.what();
  }
}

TEST(DocumentPacking, FixedWindowBatchesHaveNoLabelMask) {
  auto fx = testing::read_json_fixture("loader_a.json");
  Loader loader(testing::parse_yaml(testing::fixture_config_yaml(fx, "a", 34521)),
                LoaderOptions{.prefetch = false});
  EXPECT_TRUE(loader.next_batch(0, 1).label_mask.empty());
  EXPECT_FALSE(loader.dataset().packed());
}

}  // namespace
}  // namespace tandem::data

namespace tandem::data {
namespace {

std::string with_work_dir(std::string yaml, const std::string& dir) {
  return yaml + "  work_dir: \"" + dir + "\"\n";
}

nlohmann::json case_named(const std::string& name) {
  for (const auto& c : packed_cases())
    if (c["name"] == name) return c;
  throw std::runtime_error("no fixture case " + name);
}

std::vector<std::vector<std::int64_t>> all_instances(const TokenDataset& ds) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::uint64_t i = 0; i < ds.num_instances(); ++i) {
    out.emplace_back(static_cast<std::size_t>(ds.sequence_length()));
    ds.read_instance(i, out.back());
  }
  return out;
}

TEST(PackingCache, NamesAreOlmoCoresForTheSamePaths) {
  const nlohmann::json cache = packed_fixture_json()["olmo_core_cache"];
  ASSERT_EQ(cache["groups"].size(), 2u);
  for (const auto& group : cache["groups"]) {
    PackingGroup g;
    g.paths = group["paths"].get<std::vector<std::string>>();
    g.size_bytes = group["size_bytes"].get<std::vector<std::uint64_t>>();
    g.sequence_length = cache["sequence_length"];
    g.strategy = long_doc_strategy_from_name(cache["long_doc_strategy"]);
    std::vector<std::string> names;
    for (const auto& p : packing_cache_paths("work", g))
      names.push_back(std::filesystem::path(p).filename().string());
    EXPECT_EQ(names, group["cache_names"].get<std::vector<std::string>>());
  }
}

// OLMo-core's own cache, made with numpy's default sort: tandem hands out OLMo-core's instances,
// tie order included, which its own stable packing would not.
TEST(PackingCache, ReadsOlmoCoresCacheAndHandsOutItsInstances) {
  const nlohmann::json cache = packed_fixture_json()["olmo_core_cache"];
  const nlohmann::json c = case_named(cache["case"]);
  const std::string work = testing::temp_dir("packing_cache_olmo");
  const DataConfig config = testing::parse_yaml(with_work_dir(packed_config_yaml(c), work));
  const std::vector<std::string> files = config.all_files();
  for (std::size_t g = 0; g < cache["groups"].size(); ++g) {
    PackingGroup group;
    for (std::size_t f = 2 * g; f < std::min(files.size(), 2 * g + 2); ++f) {
      group.paths.push_back(files[f]);
      group.size_bytes.push_back(std::filesystem::file_size(files[f]));
    }
    group.sequence_length = config.sequence_length;
    group.strategy = config.packing->long_doc_strategy;
    const auto targets = packing_cache_paths(work, group);
    std::filesystem::create_directories(std::filesystem::path(targets[0]).parent_path());
    for (std::size_t k = 0; k < 3; ++k)
      std::filesystem::copy_file(packed_fixture(cache["groups"][g]["cache_files"][k]), targets[k]);
  }
  const auto got = all_instances(TokenDataset(config));
  EXPECT_EQ(got, cache["input_ids"].get<std::vector<std::vector<std::int64_t>>>());
  std::vector<std::vector<std::int64_t>> stable;
  for (const auto& inst : c["stable"]["instances"])
    stable.push_back(inst["input_ids"].get<std::vector<std::int64_t>>());
  EXPECT_NE(got, stable);  // the cache, not a fresh packing, gave them
}

TEST(PackingCache, WritesItsPackingAndReadsItBackAndRefusesACorruptOne) {
  const nlohmann::json c = case_named("p32_bos_truncate_group3");
  const std::string work = testing::temp_dir("packing_cache_round_trip");
  const DataConfig config = testing::parse_yaml(with_work_dir(packed_config_yaml(c), work));
  const auto packed = all_instances(TokenDataset(config));
  std::vector<std::string> written;
  for (const auto& e : std::filesystem::directory_iterator(work + "/dataset-common"))
    written.push_back(e.path().string());
  ASSERT_EQ(written.size(), 6u);  // two groups (3 + 1 files), three arrays each
  EXPECT_EQ(all_instances(TokenDataset(config)), packed);

  // Two instances claiming the same document: refused, naming the file.
  std::string members;
  for (const auto& p : written)
    if (p.find("documents-by-instance") != std::string::npos) members = p;
  std::string bytes = core::read_file(members);
  ASSERT_GE(bytes.size(), 16u);
  std::memcpy(bytes.data() + 8, bytes.data(), 8);
  core::write_file_atomic(members, bytes);
  try {
    TokenDataset again(config);
    ADD_FAILURE() << "a corrupt packing cache was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(members), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in two instances"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::data

namespace tandem::data {
namespace {

// `tandem data audit` on packed data: the order checks as for fixed windows, plus the packing's
// own (every document in one instance) and its token budget, which the fixture determines.
TEST(PackedAudit, ReportsEveryDocumentOnceAndTheTokenBudget) {
  const nlohmann::json c = case_named("p32_bos_truncate_group3");
  const std::string dir = testing::temp_dir("packed_audit");
  testing::write_text(dir + "/data.yaml", packed_config_yaml(c));
  const auto r =
      tandem::testing::run_tandem("data audit " + dir + "/data.yaml --world-sizes 1,2,4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  ASSERT_TRUE(report["ok"].get<bool>());
  const auto& p = report["packing"];
  std::uint64_t documents = 0, tokens = 0, file_tokens = 0;
  for (const auto& inst : c["stable"]["instances"])
    for (const auto& len : inst["document_lengths"])
      ++documents, tokens += len.get<std::uint64_t>();
  for (const auto& f : c["files"]) file_tokens += std::filesystem::file_size(packed_fixture(f)) / 4;
  const std::uint64_t n = c["stable"]["num_instances"], T = c["sequence_length"];
  EXPECT_EQ(p["instances"].get<std::uint64_t>(), n);
  EXPECT_EQ(p["documents"].get<std::uint64_t>(), documents);
  EXPECT_EQ(p["document_tokens"].get<std::uint64_t>(), tokens);
  EXPECT_EQ(p["padding_tokens"].get<std::uint64_t>(), n * T - tokens);
  EXPECT_EQ(p["file_tokens"].get<std::uint64_t>(), file_tokens);
  EXPECT_LT(tokens, file_tokens);  // truncation dropped tails of long documents

  const auto text = tandem::testing::run_tandem("data audit " + dir + "/data.yaml");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("every document is in exactly one instance"), std::string::npos)
      << text.output;
}

}  // namespace
}  // namespace tandem::data

namespace tandem::data {
namespace {

// use_array_if_local: false, document boundaries from each file's .csv.gz metadata, where a
// quarter of the documents lack a final EOS and some hold one inside: every instance, its doc_lens
// (from the metadata documents, not a scan), the fingerprint (use_array_if_local and the metadata
// hashes) and the global order are OLMo-core's; its EOS scan would have given other instances.
TEST(PackedMetadata, BoundariesFromMetadataAreOlmoCores) {
  const nlohmann::json cases = packed_fixture_json()["metadata_cases"];
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ASSERT_TRUE(c["eos_scan_differs"].get<bool>());
    const DataConfig config = testing::parse_yaml(
        packed_config_yaml(c) + "  use_array_if_local: false\n  generate_doc_lengths: true\n");
    auto dataset = std::make_shared<const TokenDataset>(config);
    ASSERT_TRUE(dataset->documents_from_metadata());
    ASSERT_EQ(dataset->num_instances(), c["num_instances"].get<std::uint64_t>());
    EXPECT_EQ(dataset->fingerprint(), c["fingerprint"].get<std::string>());
    expect_instances(*dataset, config, c["instances"]);
    const auto T = static_cast<std::size_t>(config.sequence_length);
    std::vector<std::int64_t> starts(T);
    Loader loader(config, dataset, {.prefetch = false});
    auto order = loader.plan(1)->global_order();
    EXPECT_EQ(std::vector<std::uint64_t>(order.begin(), order.end()),
              c["global_indices_epoch1"].get<std::vector<std::uint64_t>>());
    // The loader hands the metadata documents to the training step.
    const Batch b = loader.next_batch(0, 1);
    ASSERT_EQ(b.document_starts.size(), b.input_ids.size());
    dataset->document_starts(b.instance_ids[0], starts);
    EXPECT_EQ(std::vector<std::int64_t>(b.document_starts.begin(), b.document_starts.begin() + T),
              starts);
  }
}

// The cache of metadata-boundary packing is named as OLMo-core names it (use_array_if_local and
// each file's metadata hash in the key): the files tandem writes for the fixture's relative
// paths are OLMo-core's names.
TEST(PackedMetadata, CacheNamesAreOlmoCoresForTheSamePaths) {
  const nlohmann::json cases = packed_fixture_json()["metadata_cases"];
  const nlohmann::json& c = cases[0];
  ASSERT_TRUE(c.contains("cache_names"));
  std::set<std::string> want;
  for (const auto& group : c["cache_names"])
    for (const auto& name : group["cache_names"]) want.insert(name.get<std::string>());
  const std::string work = testing::temp_dir("packing_cache_metadata");
  std::string yaml = "data:\n  dataset: packed\n  paths: [";
  for (const auto& f : c["files"]) yaml += "\"" + f.get<std::string>() + "\", ";
  yaml += "]\n  sequence_length: " + std::to_string(c["sequence_length"].get<int>()) +
          "\n  global_batch_size: " + std::to_string(c["global_batch_size"].get<int>()) +
          "\n  seed: 1\n  vocab_size: " + std::to_string(c["vocab_size"].get<int>()) +
          "\n  dtype: " + c["dtype"].get<std::string>() +
          "\n  eos_token_id: " + std::to_string(c["eos_token_id"].get<int>()) +
          "\n  pad_token_id: " + std::to_string(c["pad_token_id"].get<int>()) +
          "\n  long_doc_strategy: " + c["long_doc_strategy"].get<std::string>() +
          "\n  source_group_size: " + std::to_string(c["source_group_size"].get<int>()) +
          "\n  use_array_if_local: false\n  work_dir: \"" + work + "\"\n";
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(packed_fixture(""));  // relative paths, as OLMo-core was given
  std::set<std::string> written;
  try {
    const TokenDataset dataset(testing::parse_yaml(yaml));
    for (const auto& e : std::filesystem::directory_iterator(work + "/dataset-common"))
      written.insert(e.path().filename().string());
  } catch (...) {
    std::filesystem::current_path(cwd);
    throw;
  }
  std::filesystem::current_path(cwd);
  EXPECT_EQ(written, want);
}

TEST(PackedMetadata, BadMetadataIsRefusedNamingTheFileAndLine) {
  const std::string dir = testing::temp_dir("packing_metadata_bad");
  testing::write_tokens(dir + "/t.npy", std::vector<std::uint16_t>{1, 2, 9, 3, 4, 9, 5});
  // The error of opening t.npy with `metadata` as its t.csv.gz (none when nullptr).
  auto error_with = [&](const char* metadata) -> std::string {
    std::filesystem::remove(dir + "/t.csv.gz");
    if (metadata) {
      gzFile gz = gzopen((dir + "/t.csv.gz").c_str(), "wb");
      gzwrite(gz, metadata, static_cast<unsigned>(std::strlen(metadata)));
      gzclose(gz);
    }
    try {
      TokenDataset ds(testing::parse_yaml(
          "data:\n  dataset: packed\n  paths: [\"" + dir +
          "/t.npy\"]\n  sequence_length: 4\n  global_batch_size: 4\n  seed: 1\n  vocab_size: 10\n"
          "  dtype: uint16\n  eos_token_id: 9\n  pad_token_id: 0\n  use_array_if_local: false\n"));
      return "";
    } catch (const core::Error& e) {
      return e.what();
    }
  };
  EXPECT_EQ(error_with("0,3\n3,6,extra\n"), "");
  EXPECT_NE(error_with("0,3\n3,8\n").find("line 2: document [3, 8) is out of bounds of its 7"),
            std::string::npos);
  EXPECT_NE(error_with("0,3\nstart,end\n").find("line 2: expected start,end"), std::string::npos);
  EXPECT_NE(error_with("3,3\n").find("line 1: empty document"), std::string::npos);
  const std::string missing = error_with(nullptr);
  EXPECT_NE(missing.find("no such metadata file"), std::string::npos) << missing;
}

// A group whose files hold no complete document packs into nothing: tandem writes three empty
// arrays and reads them back as an empty packing (fuzz/corpus/packed_inputs/empty-cache-arrays:
// reading an empty array once passed a null buffer to memcpy).
TEST(PackingCache, EmptyArraysAreAGroupWithoutDocuments) {
  PackingGroup g;
  g.paths = {"part-00.npy"};
  g.size_bytes = {400};
  g.num_tokens = {100};
  g.sequence_length = 64;
  const std::string work = testing::temp_dir("packing_cache_empty");
  write_packing_cache(work, g, PackedInstances{{}, {0}, {}});
  for (const auto& p : packing_cache_paths(work, g))
    EXPECT_EQ(std::filesystem::file_size(p), 0u) << p;
  const auto back = read_packing_cache(work, g);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->num_instances(), 0u);
  EXPECT_TRUE(back->documents.empty());
}

}  // namespace
}  // namespace tandem::data
