// The data audit: simulates several world sizes and resume points through the real Loader and
// proves that every world size sees the same global batches, that the ranks' shares of a batch
// are disjoint and cover it, and that every instance is handed out at most once per epoch (all of
// them except the dropped tail). It also counts instances whose token content is duplicated in
// the data (a warning, not a failure).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/data/loader.h"

namespace tandem::data {

struct ResumePoint {
  std::uint64_t step = 0;               // global step (counting across epochs) at which to resume
  std::uint64_t world_size = 1;         // world size after the resume
  std::uint64_t before_world_size = 0;  // 0 = chosen by the audit (another listed world size)
};

// Parses "STEP:W" or "STEP:W_BEFORE>W" (e.g. "7:2" or "7:8>2"); throws Error naming the text.
ResumePoint parse_resume_point(const std::string& text);

struct AuditOptions {
  std::vector<std::uint64_t> world_sizes{1, 2, 4, 8};
  std::vector<ResumePoint> resume_points;  // empty: one mid-epoch change of world size
  std::uint64_t epochs = 2;
  bool check_duplicates = true;
  LoaderFault fault = LoaderFault::kNone;  // test hook: audit a faulty loader
  std::size_t max_reported = 10;           // violations named in full
};

struct AuditReport {
  bool ok = true;
  std::uint64_t num_instances = 0;
  std::uint64_t instances_per_batch = 0;
  std::uint64_t batches_per_epoch = 0;
  std::uint64_t dropped_per_epoch = 0;
  std::uint64_t epochs = 0;
  std::vector<std::uint64_t> world_sizes_checked;
  std::vector<std::string> resumes_checked;
  std::vector<std::string> notes;  // e.g. a world size that cannot split a batch
  std::uint64_t violation_count = 0;
  std::vector<std::string> violations;    // the first max_reported, in the order found
  std::uint64_t duplicate_groups = 0;     // distinct contents that occur more than once
  std::uint64_t duplicate_instances = 0;  // instances beyond the first copy of each content
  std::vector<std::vector<std::uint64_t>> duplicate_examples;
  // dataset: packed: what the packing kept and spent, checked document by document.
  struct Packing {
    std::uint64_t documents = 0;
    std::uint64_t instances = 0;
    std::uint64_t document_tokens = 0;  // tokens of the packed documents
    std::uint64_t padding_tokens = 0;
    std::uint64_t file_tokens = 0;  // every token of the files; the rest are in no instance
  };
  std::optional<Packing> packing;
  // source_mixture: each source's share as allocated (OLMo-core's outcome tables) and the tokens
  // its instances serve; every instance checked to lie inside its entry's allocation.
  struct MixtureSource {
    std::string name;
    double target_ratio = 0;
    std::uint64_t population = 0, needed = 0, selected = 0;
    std::uint64_t entries = 0;  // file entries (a file counted once per repetition)
    std::uint64_t served = 0;   // tokens in the dataset's instances
  };
  struct Mixture {
    std::uint64_t requested_tokens = 0, total_tokens = 0;
    std::uint64_t requested_instances = 0;
    std::vector<MixtureSource> sources;
  };
  std::optional<Mixture> mixture;

  nlohmann::json to_json() const;
  std::string to_text() const;
};

AuditReport run_audit(const DataConfig& config, const AuditOptions& options);

}  // namespace tandem::data
