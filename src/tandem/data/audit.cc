#include "tandem/data/audit.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"

namespace tandem::data {
namespace {

using Row = std::vector<std::uint64_t>;

class Recorder {
 public:
  Recorder(AuditReport& report, std::size_t max_reported) : report_(report), max_(max_reported) {}
  void violation(std::string message) {
    report_.ok = false;
    ++report_.violation_count;
    if (report_.violations.size() < max_) report_.violations.push_back(std::move(message));
  }

 private:
  AuditReport& report_;
  std::size_t max_;
};

// Ids-only loaders, one per rank, advancing in lockstep.
class RankGroup {
 public:
  RankGroup(const DataConfig& config, std::shared_ptr<const TokenDataset> dataset,
            std::uint64_t world_size, LoaderFault fault)
      : world_size_(world_size) {
    LoaderOptions opts;
    opts.read_tokens = false;
    opts.fault = fault;
    for (std::uint64_t r = 0; r < world_size; ++r)
      loaders_.push_back(std::make_unique<Loader>(config, dataset, opts));
  }
  std::vector<Row> next() {
    std::vector<Row> shares;
    for (std::uint64_t r = 0; r < world_size_; ++r)
      shares.push_back(loaders_[r]->next_batch(r, world_size_).instance_ids);
    return shares;
  }
  std::vector<LoaderState> states() const {
    std::vector<LoaderState> out;
    for (const auto& l : loaders_) out.push_back(l->state());
    return out;
  }
  void restore(const LoaderState& s) {
    for (auto& l : loaders_) l->restore(s);
  }

 private:
  std::uint64_t world_size_;
  std::vector<std::unique_ptr<Loader>> loaders_;
};

std::string preview(const Row& ids, std::size_t n = 8) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size() && i < n; ++i)
    out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > n) out += ", ...";
  return out + "]";
}

// Tracks one simulated run (a sequence of steps, possibly with a resume): per step, shares are
// checked against the reference global batch; per epoch, each instance at most once.
class RunChecker {
 public:
  RunChecker(std::string name, const std::vector<Row>& reference, std::uint64_t batches_per_epoch,
             std::uint64_t num_instances, Recorder& rec)
      : name_(std::move(name)),
        reference_(reference),
        per_epoch_(batches_per_epoch),
        seen_step_(num_instances, kUnseen),
        rec_(rec) {}

  void check_step(std::uint64_t global_step, const std::vector<Row>& shares) {
    const std::uint64_t epoch = 1 + global_step / per_epoch_;
    const std::uint64_t step = global_step % per_epoch_;
    if (step == 0 && global_step > 0) finish_epoch(epoch - 1);
    const Row& want = reference_[global_step];
    const std::uint64_t w = shares.size();
    std::string where = fmt::format("{}, epoch {} step {}", name_, epoch, step);

    // Disjoint shares, and each instance at most once in the epoch.
    std::map<std::uint64_t, std::uint64_t> owner;
    for (std::uint64_t r = 0; r < w; ++r) {
      if (shares[r].size() != want.size() / w)
        rec_.violation(
            fmt::format("{}: rank {} got {} instances, expected {} (= {} / world size {})", where,
                        r, shares[r].size(), want.size() / w, want.size(), w));
      for (std::uint64_t id : shares[r]) {
        auto [it, fresh] = owner.emplace(id, r);
        if (!fresh)
          rec_.violation(fmt::format("{}: instance {} handed to rank {} and to rank {}", where, id,
                                     it->second, r));
        if (id >= seen_step_.size()) {
          rec_.violation(fmt::format("{}: instance {} does not exist", where, id));
          continue;
        }
        if (seen_step_[id] != kUnseen && fresh)
          rec_.violation(fmt::format("{}: instance {} repeated within epoch {} (first at step {})",
                                     where, id, epoch, seen_step_[id]));
        seen_step_[id] = step;
        ++seen_in_epoch_;
      }
    }
    // Re-assembled batch (rank r holds positions r, r+W, ...) equals the reference batch.
    Row assembled(want.size(), kUnseen);
    bool shaped = true;
    for (std::uint64_t r = 0; r < w && shaped; ++r)
      for (std::size_t i = 0; i < shares[r].size(); ++i) {
        std::size_t pos = r + i * w;
        if (pos >= assembled.size()) {
          shaped = false;
          break;
        }
        assembled[pos] = shares[r][i];
      }
    if (!shaped || assembled != want) {
      Row missing;
      for (std::uint64_t id : want)
        if (!owner.count(id)) missing.push_back(id);
      rec_.violation(fmt::format(
          "{}: the ranks' shares do not reassemble the global batch (world size 1 gives {}); "
          "{} of its instances missing {}",
          where, preview(want), missing.size(), preview(missing)));
    }
  }

  void finish_epoch(std::uint64_t epoch) {
    const std::uint64_t expected = per_epoch_ * (reference_.empty() ? 0 : reference_[0].size());
    if (seen_in_epoch_ != expected)
      rec_.violation(
          fmt::format("{}, epoch {}: {} instances handed out, expected {} (every "
                      "instance of the epoch's full batches exactly once)",
                      name_, epoch, seen_in_epoch_, expected));
    std::fill(seen_step_.begin(), seen_step_.end(), kUnseen);
    seen_in_epoch_ = 0;
  }

 private:
  static constexpr std::uint64_t kUnseen = ~0ull;
  std::string name_;
  const std::vector<Row>& reference_;
  std::uint64_t per_epoch_;
  std::vector<std::uint64_t> seen_step_;
  std::uint64_t seen_in_epoch_ = 0;
  Recorder& rec_;
};

void find_duplicates(const TokenDataset& ds, AuditReport& report) {
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> by_hash;
  std::vector<std::int64_t> buf(static_cast<std::size_t>(ds.sequence_length()));
  for (std::uint64_t i = 0; i < ds.num_instances(); ++i) {
    ds.read_instance(i, buf);
    auto bytes = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(buf.data()),
                                               buf.size() * sizeof(std::int64_t));
    by_hash[core::xxh64(bytes)].push_back(i);
  }
  std::vector<std::vector<std::uint64_t>> groups;
  for (auto& [h, ids] : by_hash)
    if (ids.size() > 1) groups.push_back(ids);
  std::sort(groups.begin(), groups.end());
  report.duplicate_groups = groups.size();
  for (const auto& g : groups) report.duplicate_instances += g.size() - 1;
  for (std::size_t i = 0; i < groups.size() && i < 5; ++i) {
    auto g = groups[i];
    if (g.size() > 8) g.resize(8);
    report.duplicate_examples.push_back(g);
  }
}

}  // namespace

ResumePoint parse_resume_point(const std::string& text) {
  ResumePoint p;
  auto colon = text.find(':');
  try {
    TANDEM_CHECK(colon != std::string::npos, "x");
    p.step = std::stoull(text.substr(0, colon));
    std::string rest = text.substr(colon + 1);
    auto gt = rest.find('>');
    if (gt != std::string::npos) {
      p.before_world_size = std::stoull(rest.substr(0, gt));
      rest = rest.substr(gt + 1);
    }
    std::size_t used = 0;
    p.world_size = std::stoull(rest, &used);
    TANDEM_CHECK(used == rest.size() && p.world_size > 0, "x");
  } catch (const std::exception&) {
    core::fail("--resume-at '{}': expected STEP:W or STEP:W_BEFORE>W with positive integers", text);
  }
  return p;
}

// Packed data: every document of every group in exactly one instance, no token in two documents,
// no instance over sequence_length; and the token budget (kept, padding, in no instance).
void audit_packing(const TokenDataset& ds, AuditReport& report, Recorder& rec) {
  AuditReport::Packing p;
  for (std::size_t f = 0; f < ds.num_files(); ++f) p.file_tokens += ds.file(f).num_tokens();
  const auto T = static_cast<std::uint64_t>(ds.sequence_length());
  for (std::size_t g = 0; g < ds.packed_groups().size(); ++g) {
    const PackedInstances& group = ds.packed_groups()[g];
    std::vector<std::uint32_t> seen(group.documents.size(), 0);
    for (std::uint64_t i = 0; i < group.num_instances(); ++i) {
      std::uint64_t tokens = 0;
      for (std::uint64_t m = group.offsets[i]; m < group.offsets[i + 1]; ++m) {
        ++seen.at(group.members[m]);
        tokens += group.documents[group.members[m]].length;
      }
      if (tokens > T)
        rec.violation(
            fmt::format("packing group {} instance {}: {} tokens for {}", g, i, tokens, T));
      p.padding_tokens += T - std::min(tokens, T);
    }
    for (std::size_t d = 0; d < seen.size(); ++d)
      if (seen[d] != 1)
        rec.violation(
            fmt::format("packing group {}: document {} is in {} instances", g, d, seen[d]));
    std::vector<PackedDocument> by_place = group.documents;
    std::sort(by_place.begin(), by_place.end(), [](const auto& a, const auto& b) {
      return std::tie(a.file, a.start) < std::tie(b.file, b.start);
    });
    for (std::size_t d = 1; d < by_place.size(); ++d)
      if (by_place[d].file == by_place[d - 1].file &&
          by_place[d - 1].start + by_place[d - 1].length > by_place[d].start)
        rec.violation(fmt::format("packing group {}: two documents share tokens of {} at {}", g,
                                  ds.file(by_place[d].file).path(), by_place[d].start));
    for (const PackedDocument& d : group.documents) p.document_tokens += d.length;
    p.documents += group.documents.size();
    p.instances += group.num_instances();
  }
  report.packing = p;
}

// Source mixture: every instance the dataset hands out lies inside its entry's allocation (the
// dataset's own offsets, checked against the mixture's outcome), and the tokens each source
// serves in instances (fewer than selected when max_target_sequence_length cuts windows).
void audit_mixture(const DataConfig& config, const TokenDataset& ds, AuditReport& report,
                   Recorder& rec) {
  const MixtureOutcome& m = *config.mixture_outcome;
  TANDEM_CHECK(m.entries.size() == ds.num_files(), "mixture: {} entries, {} dataset files",
               m.entries.size(), ds.num_files());
  AuditReport::Mixture out;
  out.requested_tokens = static_cast<std::uint64_t>(config.source_mixture->requested_tokens);
  out.total_tokens = m.total_tokens();
  out.requested_instances = m.requested_instances;
  std::map<std::string, std::size_t> source_of;
  for (const auto& s : m.sources) {
    source_of[s.name] = out.sources.size();
    out.sources.push_back({s.name, s.target_ratio, s.population, s.needed, s.selected, 0, 0});
  }
  for (const MixtureEntry& e : m.entries) ++out.sources[source_of.at(e.source)].entries;
  const auto seq = static_cast<std::uint64_t>(config.sequence_length);
  for (std::uint64_t i = 0; i < ds.num_instances(); ++i) {
    const InstanceLocation loc = ds.locate(i);
    const MixtureEntry& e = m.entries[loc.file];
    const std::uint64_t end = (loc.local_index + 1) * seq;
    if (end > e.tokens)
      rec.violation(
          fmt::format("instance {} reads tokens [{}, {}) of {}, past the {} allocated "
                      "to mixture entry {}",
                      i, end - seq, end, e.path, e.tokens, loc.file));
    out.sources[source_of.at(e.source)].served += seq;
  }
  if (ds.num_instances() < m.requested_instances)
    report.notes.push_back(fmt::format(
        "mixture: {} instances for the {} that fill whole steps (the sources lack room, or "
        "max_target_sequence_length cut windows)",
        ds.num_instances(), m.requested_instances));
  report.mixture = out;
}

AuditReport run_audit(const DataConfig& config, const AuditOptions& options) {
  AuditReport report;
  Recorder rec(report, options.max_reported);
  auto dataset = std::make_shared<const TokenDataset>(config);
  Loader reference_loader(config, dataset, LoaderOptions{false, false, LoaderFault::kNone});
  const std::uint64_t per_epoch = reference_loader.batches_per_epoch();
  const std::uint64_t ipb = static_cast<std::uint64_t>(config.instances_per_batch());
  TANDEM_CHECK(options.epochs >= 1, "the audit needs at least one epoch");
  report.num_instances = dataset->num_instances();
  report.instances_per_batch = ipb;
  report.batches_per_epoch = per_epoch;
  report.dropped_per_epoch = report.num_instances - per_epoch * ipb;
  report.epochs = options.epochs;
  const std::uint64_t total_steps = per_epoch * options.epochs;

  // Reference: the global batches themselves, i.e. world size 1 without any fault.
  std::vector<Row> reference;
  for (std::uint64_t e = 1; e <= options.epochs; ++e) {
    auto plan = reference_loader.plan(e);
    for (std::uint64_t b = 0; b < per_epoch; ++b) {
      auto row = plan->global_batch(b);
      reference.emplace_back(row.begin(), row.end());
    }
    if (e >= 2 && config.shuffle && per_epoch > 1 &&
        std::equal(reference.end() - per_epoch, reference.end(), reference.end() - 2 * per_epoch))
      rec.violation(fmt::format("epoch {} repeats the order of epoch {}", e, e - 1));
  }

  std::vector<std::uint64_t> valid;
  for (std::uint64_t w : options.world_sizes) {
    if (w == 0 || ipb % w != 0) {
      report.notes.push_back(fmt::format(
          "world size {} skipped: it does not divide the {} instances of a global batch", w, ipb));
      continue;
    }
    valid.push_back(w);
  }
  TANDEM_CHECK(!valid.empty(), "none of the world sizes divides the {} instances of a batch", ipb);

  for (std::uint64_t w : valid) {
    RankGroup group(config, dataset, w, options.fault);
    RunChecker checker(fmt::format("world size {}", w), reference, per_epoch, report.num_instances,
                       rec);
    for (std::uint64_t s = 0; s < total_steps; ++s) checker.check_step(s, group.next());
    checker.finish_epoch(options.epochs);
    report.world_sizes_checked.push_back(w);
  }

  std::vector<ResumePoint> resumes = options.resume_points;
  if (resumes.empty()) {
    // Default: change from the last to the first listed world size in the middle of epoch 1, and
    // back early in epoch 2 (when auditing two epochs).
    ResumePoint a{per_epoch / 2 == 0 ? 1 : per_epoch / 2, valid.front(), valid.back()};
    resumes.push_back(a);
    if (options.epochs >= 2)
      resumes.push_back({per_epoch + (per_epoch > 2 ? 1 : 0), valid.back(), valid.front()});
  }
  for (const ResumePoint& rp : resumes) {
    std::uint64_t before = rp.before_world_size;
    if (before == 0) {
      before = valid.back() != rp.world_size ? valid.back() : valid.front();
    }
    std::string name =
        fmt::format("resume at step {} from world size {} to {}", rp.step, before, rp.world_size);
    if (ipb % before != 0 || ipb % rp.world_size != 0) {
      rec.violation(
          fmt::format("{}: world size does not divide the {} instances of a batch", name, ipb));
      continue;
    }
    if (rp.step > total_steps) {
      rec.violation(fmt::format("{}: step is past the {} audited steps", name, total_steps));
      continue;
    }
    RunChecker checker(name, reference, per_epoch, report.num_instances, rec);
    RankGroup first(config, dataset, before, options.fault);
    for (std::uint64_t s = 0; s < rp.step; ++s) checker.check_step(s, first.next());
    auto states = first.states();
    for (std::size_t r = 1; r < states.size(); ++r)
      if (states[r].to_json() != states[0].to_json())
        rec.violation(fmt::format("{}: rank {} state differs from rank 0", name, r));
    // Round-trip through JSON, as a checkpoint would.
    LoaderState saved = LoaderState::from_json(nlohmann::json::parse(states[0].to_json().dump()));
    RankGroup second(config, dataset, rp.world_size, options.fault);
    second.restore(saved);
    for (std::uint64_t s = rp.step; s < total_steps; ++s) checker.check_step(s, second.next());
    checker.finish_epoch(options.epochs);
    report.resumes_checked.push_back(name);
  }

  if (dataset->packed()) audit_packing(*dataset, report, rec);
  if (config.mixture_outcome) audit_mixture(config, *dataset, report, rec);
  if (options.check_duplicates) find_duplicates(*dataset, report);
  return report;
}

nlohmann::json AuditReport::to_json() const {
  nlohmann::json j;
  j["ok"] = ok;
  j["num_instances"] = num_instances;
  j["instances_per_batch"] = instances_per_batch;
  j["batches_per_epoch"] = batches_per_epoch;
  j["dropped_per_epoch"] = dropped_per_epoch;
  j["epochs"] = epochs;
  j["world_sizes_checked"] = world_sizes_checked;
  j["resumes_checked"] = resumes_checked;
  j["notes"] = notes;
  j["violation_count"] = violation_count;
  j["violations"] = violations;
  j["duplicates"] = {{"groups", duplicate_groups},
                     {"instances", duplicate_instances},
                     {"examples", duplicate_examples}};
  if (packing)
    j["packing"] = {{"documents", packing->documents},
                    {"instances", packing->instances},
                    {"document_tokens", packing->document_tokens},
                    {"padding_tokens", packing->padding_tokens},
                    {"file_tokens", packing->file_tokens}};
  if (mixture) {
    nlohmann::json sources = nlohmann::json::array();
    for (const auto& s : mixture->sources)
      sources.push_back({{"name", s.name},
                         {"target_ratio", s.target_ratio},
                         {"population", s.population},
                         {"needed", s.needed},
                         {"selected", s.selected},
                         {"served", s.served},
                         {"entries", s.entries}});
    j["mixture"] = {{"requested_tokens", mixture->requested_tokens},
                    {"total_tokens", mixture->total_tokens},
                    {"requested_instances", mixture->requested_instances},
                    {"sources", sources}};
  }
  return j;
}

std::string AuditReport::to_text() const {
  std::string out;
  out += fmt::format(
      "data audit: {} instances, {} per global batch, {} batches per epoch, {} "
      "dropped per epoch, {} epoch(s)\n",
      num_instances, instances_per_batch, batches_per_epoch, dropped_per_epoch, epochs);
  for (auto w : world_sizes_checked) out += fmt::format("  checked world size {}\n", w);
  for (const auto& r : resumes_checked) out += fmt::format("  checked {}\n", r);
  for (const auto& n : notes) out += fmt::format("  note: {}\n", n);
  if (packing) {
    const double slots = static_cast<double>(packing->document_tokens + packing->padding_tokens);
    out += fmt::format(
        "  packing: {} documents in {} instances; padding {:.2f}% "
        "of instance tokens; {} of the files' {} tokens in no instance (truncated or after a "
        "file's last document)\n",
        packing->documents, packing->instances,
        slots > 0 ? 100.0 * static_cast<double>(packing->padding_tokens) / slots : 0.0,
        packing->file_tokens - packing->document_tokens, packing->file_tokens);
  }
  if (mixture) {
    out += fmt::format("  mixture: {} tokens for the {} requested\n", mixture->total_tokens,
                       mixture->requested_tokens);
    for (const auto& s : mixture->sources)
      out += fmt::format(
          "    {}: target {}, {} of its {} tokens ({:.4f} of them, {:.4f} of the mixture) in {} "
          "file entries, {} in instances\n",
          s.name, s.target_ratio, s.selected, s.population,
          s.population ? static_cast<double>(s.selected) / static_cast<double>(s.population) : 0.0,
          mixture->total_tokens
              ? static_cast<double>(s.selected) / static_cast<double>(mixture->total_tokens)
              : 0.0,
          s.entries, s.served);
  }
  if (duplicate_groups > 0) {
    out += fmt::format(
        "  warning: {} instances duplicate the token content of another ({} "
        "distinct contents repeated); e.g. instances",
        duplicate_instances, duplicate_groups);
    for (const auto& g : duplicate_examples) out += " " + preview(g);
    out += "\n";
  }
  if (ok) {
    out += fmt::format(
        "OK: every world size sees the same global batches, ranks' shares are disjoint and "
        "cover each batch, every instance appears exactly once per epoch{}\n",
        packing ? "; every document is in exactly one instance and no token in two" : "");
  } else {
    out += fmt::format("FAILED: {} violation(s); first ones:\n", violation_count);
    for (const auto& v : violations) out += "  " + v + "\n";
  }
  return out;
}

}  // namespace tandem::data
