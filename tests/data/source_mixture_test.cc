// Source mixtures (data.source_mixture) against OLMo-core's SourceMixtureDatasetConfig and
// NumpyFSLDatasetMixture (tests/fixtures/data/mixture, tools/make_mixture_fixtures.py): the
// allocation per file entry, each source's selection, the dataset's size and fingerprint, the
// loader's order and tokens on 1 and 2 ranks over two epochs, a resume from OLMo-core's state,
// OLMo-core's refusals, and tandem's own checks of the config.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "data_test_util.h"
#include "tandem/core/error.h"
#include "tandem/data/audit.h"
#include "tandem/data/loader.h"

namespace tandem::data {
namespace {

const nlohmann::json& mixture_fixture() {
  static const nlohmann::json fx = testing::read_json_fixture("mixture/mixture.json");
  return fx;
}

std::string in_mixture_fixture(const std::string& relative) {
  return testing::fixture("mixture/" + relative);
}

// tandem's data config of a fixture case (OLMo-core's field names under source_mixture).
std::string mixture_case_yaml(const nlohmann::json& c, const std::string& extra = "") {
  const auto& fx = mixture_fixture();
  std::string yaml = "data:\n  source_mixture:\n";
  yaml +=
      "    requested_tokens: " + std::to_string(c["requested_tokens"].get<std::int64_t>()) + "\n";
  yaml += "    sources:\n";
  for (const auto& s : c["sources"]) {
    yaml += "      - source_name: " + s["source_name"].get<std::string>() + "\n";
    yaml += "        target_ratio: " + s["target_ratio"].dump() + "\n";
    std::string paths;
    for (const auto& p : s["paths"]) {  // relative to the fixture folder unless absolute
      const std::string path = p.get<std::string>();
      paths += "\"" + (path.front() == '/' ? path : in_mixture_fixture(path)) + "\", ";
    }
    yaml += "        paths: [" + paths + "]\n";
    for (const char* key : {"max_repetition_ratio", "max_source_fraction"})
      if (s.contains(key)) yaml += std::string("        ") + key + ": " + s[key].dump() + "\n";
  }
  yaml += "  sequence_length: " + std::to_string(c["seq"].get<int>()) + "\n";
  yaml +=
      "  global_batch_size: " + std::to_string(c["seq"].get<int>() * c["batch"].get<int>()) + "\n";
  yaml += "  seed: " + std::to_string(c.value("seed", 1)) + "\n";
  yaml += "  vocab_size: " + std::to_string(fx["vocab_size"].get<int>()) + "\n";
  yaml += "  dtype: uint32\n";
  yaml += "  eos_token_id: " + std::to_string(fx["eos_token_id"].get<int>()) + "\n";
  yaml += "  pad_token_id: " + std::to_string(fx["pad_token_id"].get<int>()) + "\n";
  if (c.contains("max_target") && !c["max_target"].is_null())
    yaml += "  max_target_sequence_length: " + std::to_string(c["max_target"].get<int>()) + "\n";
  if (c.value("filter", false)) yaml += "  instance_filter_config: {}\n";
  return yaml + extra;
}

TEST(SourceMixture, AllocatesEveryFileEntryAsOlmoCore) {
  for (const auto& c : mixture_fixture()["cases"]) {
    const std::string name = c["name"];
    DataConfig config = testing::parse_yaml(mixture_case_yaml(c));
    ASSERT_TRUE(config.mixture_outcome) << name;
    const auto& entries = config.mixture_outcome->entries;
    ASSERT_EQ(entries.size(), c["entries"].size()) << name;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& want = c["entries"][i];
      EXPECT_EQ(entries[i].path, in_mixture_fixture(want["file"])) << name << " entry " << i;
      EXPECT_EQ(entries[i].source, want["source"].get<std::string>()) << name << " entry " << i;
      EXPECT_EQ(entries[i].tokens, want["tokens"].get<std::uint64_t>()) << name << " entry " << i;
    }
    for (const auto& s : config.mixture_outcome->sources)
      EXPECT_EQ(s.selected, c["selected"][s.name].get<std::uint64_t>()) << name << " " << s.name;
    // The dataset's files are the entries, labelled by source, each read up to its allocation.
    EXPECT_EQ(config.all_files().size(), entries.size()) << name;
    EXPECT_EQ(config.file_token_limits.size(), entries.size()) << name;
  }
}

TEST(SourceMixture, DatasetSizeAndFingerprintAreOlmoCores) {
  for (const auto& c : mixture_fixture()["cases"]) {
    TokenDataset ds(testing::parse_yaml(mixture_case_yaml(c)));
    EXPECT_EQ(ds.num_instances(), c["num_instances"].get<std::uint64_t>()) << c["name"];
    EXPECT_EQ(ds.fingerprint(), c["fingerprint"].get<std::string>()) << c["name"];
  }
}

TEST(SourceMixture, LoaderOrderAndTokensAreOlmoCores) {
  std::size_t runs = 0;
  for (const auto& c : mixture_fixture()["cases"]) {
    DataConfig config = testing::parse_yaml(mixture_case_yaml(c));
    auto dataset = std::make_shared<const TokenDataset>(config);
    for (const auto& run : c["runs"]) {
      testing::expect_olmo_core_run(config, dataset, run,
                                    c["name"].get<std::string>() + " world " +
                                        run["world_size"].dump() + " epoch " + run["epoch"].dump());
      ++runs;
    }
  }
  EXPECT_EQ(runs, 16u);
}

TEST(SourceMixture, ResumesFromOlmoCoresStateOnAnotherWorldSize) {
  for (const auto& c : mixture_fixture()["cases"]) {
    const auto& r = c["resume"];
    DataConfig config = testing::parse_yaml(mixture_case_yaml(c));
    Loader loader(config);
    loader.restore(LoaderState::from_json(r["state"], "OLMo-core state_dict"));
    EXPECT_EQ(loader.state().batches_processed, r["batches_before"].get<std::uint64_t>());
    testing::expect_olmo_core_batches(loader, 0, 1, r["ranks"][0],
                                      "resumed " + c["name"].get<std::string>());
  }
}

TEST(SourceMixture, RefusesWhatOlmoCoreRefuses) {
  for (const auto& c : mixture_fixture()["errors"]) {
    const std::string name = c["name"];
    try {
      testing::parse_yaml(mixture_case_yaml(c));
      ADD_FAILURE() << name << ": accepted; OLMo-core says " << c["error"];
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      if (name == "insufficient")
        EXPECT_NE(msg.find("insufficient tokens for source 'math'"), std::string::npos) << msg;
      else
        EXPECT_NE(msg.find("target_ratios must sum to 1.0"), std::string::npos) << msg;
    }
  }
}

TEST(SourceMixture, AuditChecksWhatEachSourceGives) {
  const auto& c = mixture_fixture()["cases"][1];  // upsampled: the math file read 4 times
  ASSERT_EQ(c["name"], "upsampled");
  AuditOptions opts;
  opts.world_sizes = {1, 2, 3};
  AuditReport report = run_audit(testing::parse_yaml(mixture_case_yaml(c)), opts);
  EXPECT_TRUE(report.ok) << report.to_text();
  ASSERT_TRUE(report.mixture);
  EXPECT_EQ(report.mixture->requested_tokens, 6000u);
  // 6144 tokens allocated; max_target_sequence_length 64 cuts each entry into whole windows of
  // 64 first, so the dataset holds OLMo-core's 376 instances of 16, not 384.
  EXPECT_EQ(report.mixture->total_tokens, c["selected"]["math"].get<std::uint64_t>() +
                                              c["selected"]["web"].get<std::uint64_t>() +
                                              c["selected"]["code"].get<std::uint64_t>());
  EXPECT_EQ(report.num_instances, c["num_instances"].get<std::uint64_t>());
  ASSERT_EQ(report.mixture->sources.size(), 3u);
  EXPECT_EQ(report.mixture->sources[0].name, "math");
  EXPECT_EQ(report.mixture->sources[0].entries, 4u);
  EXPECT_EQ(report.mixture->sources[0].selected, c["selected"]["math"].get<std::uint64_t>());
  // The repeated math windows are the same tokens: the audit warns about them.
  EXPECT_GT(report.duplicate_instances, 0u);
  EXPECT_NE(report.to_text().find("math: target 0.25"), std::string::npos) << report.to_text();
  // What the instances serve: every instance once, none beyond its source's selection.
  std::uint64_t served = 0;
  for (const auto& s : report.mixture->sources) {
    EXPECT_LE(s.served, s.selected) << s.name;
    served += s.served;
  }
  EXPECT_EQ(served, report.num_instances * 16);
}

// A dataset that reads past the allocations (here: whole files, as if the limits were lost) is a
// violation naming the instance and the entry.
TEST(SourceMixture, AuditFindsInstancesPastAnAllocation) {
  const auto& c = mixture_fixture()["cases"][0];
  ASSERT_EQ(c["name"], "downsampled");
  DataConfig config = testing::parse_yaml(mixture_case_yaml(c));
  const auto files = config.all_files();
  for (std::size_t i = 0; i < files.size(); ++i)
    config.file_token_limits[i] = std::filesystem::file_size(files[i]) / 4;
  AuditOptions opts;
  opts.world_sizes = {1};
  opts.check_duplicates = false;
  const AuditReport report = run_audit(config, opts);
  EXPECT_FALSE(report.ok);
  ASSERT_FALSE(report.violations.empty());
  EXPECT_NE(report.violations[0].find("past the"), std::string::npos) << report.violations[0];
  EXPECT_NE(report.violations[0].find("allocated to mixture entry"), std::string::npos)
      << report.violations[0];
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// An upsampled source lists its files again; each distinct file is opened once (AI2's mixtures
// list thousands of files, each holding a descriptor).
TEST(SourceMixture, ARepeatedFileIsOpenedOnce) {
  const auto& c = mixture_fixture()["cases"][1];  // upsampled: math's one file, four entries
  ASSERT_EQ(c["name"], "upsampled");
  const DataConfig config = testing::parse_yaml(mixture_case_yaml(c));
  const auto files = config.all_files();
  const std::set<std::string> distinct(files.begin(), files.end());
  ASSERT_LT(distinct.size(), files.size());
  const std::size_t before = open_descriptors();
  TokenDataset ds(config);
  EXPECT_EQ(open_descriptors() - before, distinct.size());
  EXPECT_EQ(ds.num_files(), files.size());
  EXPECT_EQ(&ds.file(0), &ds.file(3));  // the math file's first and last entries
}

void expect_mixture_refused(const std::string& yaml, const std::string& fragment) {
  try {
    testing::parse_yaml(yaml);
    ADD_FAILURE() << "accepted; expected an error with '" << fragment << "'";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

nlohmann::json downsampled_mixture_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json c = mixture_fixture()["cases"][0];
  edit(c);
  return c;
}

TEST(SourceMixture, RefusesBadConfigsNamingTheSource) {
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with(
                             [](auto& c) { c["sources"][1]["max_repetition_ratio"] = 0.5; })),
                         "source 'code': max_repetition_ratio must be >= 1");
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with(
                             [](auto& c) { c["sources"][0]["max_source_fraction"] = 1.5; })),
                         "source 'web': max_source_fraction must be > 0 and <= 1");
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with([](auto& c) {
                           c["sources"][2]["target_ratio"] = -0.1;
                           c["sources"][0]["target_ratio"] = 0.8;
                         })),
                         "source 'math': target_ratio must be > 0 and <= 1");
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with(
                             [](auto& c) { c["sources"][2]["source_name"] = "web"; })),
                         "source name 'web' is given twice");
  expect_mixture_refused(
      mixture_case_yaml(downsampled_mixture_with([](auto& c) { c["requested_tokens"] = 0; })),
      "requested_tokens must be > 0");
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with([](auto& c) {
                           c["sources"][2]["paths"] = {"tokens/math/nothing-*.npy"};
                         })),
                         "did not match any files");
  // Sources come from the mixture alone; what OLMo-core ignores or refuses beside it, tandem
  // refuses.
  const auto base = mixture_fixture()["cases"][0];
  expect_mixture_refused(
      mixture_case_yaml(base,
                        "  paths: [\"" + in_mixture_fixture("tokens/web/part-00.npy") + "\"]\n"),
      "give exactly one of");
  expect_mixture_refused(
      mixture_case_yaml(
          base, "  label_mask_paths: [\"" + in_mixture_fixture("tokens/web/part-00.npy") + "\"]\n"),
      "not supported alongside source_mixture");
  expect_mixture_refused(mixture_case_yaml(base, "  source_permutation_seed: 3\n"),
                         "not supported alongside source_mixture");
  expect_mixture_refused(mixture_case_yaml(base, "  dataset: packed\n"),
                         "dataset: packed takes no source_mixture");
  std::string unknown = mixture_case_yaml(base);
  unknown.replace(unknown.find("        target_ratio: 0.6"), 0, "        weight: 3\n");
  expect_mixture_refused(unknown, "weight");
}

TEST(SourceMixture, ASourceWithoutTokensIsRefused) {
  const std::string dir = testing::temp_dir("mixture_empty");
  testing::write_tokens<std::uint32_t>(dir + "/empty.npy", {});
  expect_mixture_refused(mixture_case_yaml(downsampled_mixture_with([&](auto& c) {
                           c["sources"][2]["target_ratio"] = 0.0;
                           c["sources"][0]["target_ratio"] = 0.7;
                           c["sources"][2]["paths"] = {dir + "/empty.npy"};
                         })),
                         "source 'math' holds no tokens");
}

}  // namespace
}  // namespace tandem::data
