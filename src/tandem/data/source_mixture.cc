#include "tandem/data/source_mixture.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>

#include "tandem/core/error.h"

namespace tandem::data {
namespace {

// The checks of OLMo-core's SourceMixtureConfig.validate (its build() does not call them: it
// accepts a repetition ratio below 1 or a fraction above 1; tandem refuses them).
void check_source(const MixtureSource& s, const std::string& where) {
  TANDEM_CHECK(std::isfinite(s.target_ratio) && std::isfinite(s.max_repetition_ratio) &&
                   std::isfinite(s.max_source_fraction),
               "{}: source '{}': target_ratio, max_repetition_ratio and max_source_fraction must "
               "be finite numbers",
               where, s.name);
  if (s.target_ratio != 0) {
    TANDEM_CHECK(s.target_ratio > 0 && s.target_ratio <= 1,
                 "{}: source '{}': target_ratio must be > 0 and <= 1, got {}", where, s.name,
                 s.target_ratio);
    TANDEM_CHECK(s.max_source_fraction > 0 && s.max_source_fraction <= 1,
                 "{}: source '{}': max_source_fraction must be > 0 and <= 1, got {}", where, s.name,
                 s.max_source_fraction);
  }
  TANDEM_CHECK(s.max_repetition_ratio >= 1,
               "{}: source '{}': max_repetition_ratio must be >= 1, got {}", where, s.name,
               s.max_repetition_ratio);
  TANDEM_CHECK(s.max_source_fraction >= 0 && s.max_source_fraction <= 1,
               "{}: source '{}': max_source_fraction must be in [0, 1], got {}", where, s.name,
               s.max_source_fraction);
  TANDEM_CHECK(!s.files.empty(), "{}: source '{}' has no paths", where, s.name);
}

std::uint64_t tokens_in(const std::string& path, std::size_t dtype_size) {
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  TANDEM_CHECK(!ec, "token file {}: {}", path, ec.message());
  return bytes / dtype_size;
}

// Python's int(math.ceil(n * r)) for an int n and a float r.
std::uint64_t ceil_times(std::uint64_t n, double r) {
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(n) * r));
}

struct Allocation {
  std::size_t source = 0;
  std::string path;
  std::uint64_t tokens = 0;      // wanted, then granted (whole instances)
  std::uint64_t max_tokens = 0;  // the file's tokens
};

}  // namespace

std::uint64_t MixtureOutcome::total_tokens() const {
  std::uint64_t n = 0;
  for (const auto& e : entries) n += e.tokens;
  return n;
}

MixtureOutcome build_source_mixture(const SourceMixtureConfig& config, std::int64_t sequence_length,
                                    std::size_t dtype_size, const std::string& where) {
  TANDEM_CHECK(!config.sources.empty(), "{}: sources must not be empty", where);
  TANDEM_CHECK(config.requested_tokens > 0, "{}: requested_tokens must be > 0, got {}", where,
               config.requested_tokens);
  TANDEM_CHECK(sequence_length > 0 && config.global_batch_size > 0 &&
                   config.global_batch_size % sequence_length == 0,
               "{}: global_batch_size ({}) must be a positive multiple of sequence_length ({})",
               where, config.global_batch_size, sequence_length);
  std::set<std::string> names;
  double ratio_sum = 0;
  for (const auto& s : config.sources) {
    check_source(s, where);
    // OLMo-core keys its intermediate tables by name: a repeated name would lose a source.
    TANDEM_CHECK(names.insert(s.name).second, "{}: source name '{}' is given twice", where, s.name);
    ratio_sum += s.target_ratio;
  }
  // numpy.allclose(sum, 1.0): |sum - 1| <= 1e-8 + 1e-5.
  TANDEM_CHECK(std::fabs(ratio_sum - 1.0) <= 1e-8 + 1e-5,
               "{}: target_ratios must sum to 1.0, got {}", where, ratio_sum);

  const auto seq = static_cast<std::uint64_t>(sequence_length);
  MixtureOutcome out;
  std::vector<Allocation> all;
  for (std::size_t si = 0; si < config.sources.size(); ++si) {
    const MixtureSource& s = config.sources[si];
    std::vector<std::uint64_t> counts;
    std::uint64_t population = 0;
    for (const auto& f : s.files) population += counts.emplace_back(tokens_in(f, dtype_size));
    const auto needed =
        static_cast<std::uint64_t>(static_cast<double>(config.requested_tokens) * s.target_ratio);
    // Python's int() of the product (beyond int64, which no token count reaches: clamped).
    const double capacity_real =
        (static_cast<double>(population) * s.max_source_fraction) * s.max_repetition_ratio;
    const auto capacity = capacity_real >= 0x1p63 ? std::numeric_limits<std::int64_t>::max()
                                                  : static_cast<std::int64_t>(capacity_real);
    TANDEM_CHECK(capacity >= 0 && static_cast<std::uint64_t>(capacity) >= needed,
                 "{}: insufficient tokens for source '{}' at target ratio {}: it may give {} "
                 "tokens ({} x max_source_fraction {} x max_repetition_ratio {}), {} are needed",
                 where, s.name, s.target_ratio, capacity, population, s.max_source_fraction,
                 s.max_repetition_ratio, needed);
    TANDEM_CHECK(population > 0, "{}: source '{}' holds no tokens", where, s.name);
    out.sources.push_back({s.name, s.target_ratio, population, needed, 0});

    const double take = static_cast<double>(needed) / static_cast<double>(population);
    // A bound far above any real mixture (thousands of files, a few repetitions), so that a
    // mistyped ratio fails here instead of listing billions of entries.
    constexpr double kMaxEntries = 1 << 20;
    TANDEM_CHECK(std::ceil(take) * static_cast<double>(s.files.size()) <= kMaxEntries,
                 "{}: source '{}' would be read {} times over its {} files: more than {} file "
                 "entries",
                 where, s.name, std::ceil(take), s.files.size(), kMaxEntries);
    std::vector<double> chunks;  // the source read over once per chunk
    if (take > 1) {
      for (double remaining = take; remaining > 0; remaining -= std::min(1.0, remaining))
        chunks.push_back(std::min(1.0, remaining));
    } else {
      chunks.push_back(take);
    }
    for (double r : chunks)
      for (std::size_t f = 0; f < s.files.size(); ++f)
        all.push_back({si, s.files[f], ceil_times(counts[f], r), counts[f]});
  }

  // Whole instances filling whole steps: Hamilton's method within each entry's capacity.
  const auto gbs = static_cast<double>(config.global_batch_size);
  const auto steps =
      static_cast<std::uint64_t>(std::ceil(static_cast<double>(config.requested_tokens) / gbs));
  out.requested_instances = steps * (static_cast<std::uint64_t>(config.global_batch_size) / seq);
  std::vector<std::uint64_t> instances(all.size());
  std::vector<double> remainders(all.size(), 0.0);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::uint64_t cap = all[i].max_tokens / seq;
    instances[i] = std::min(all[i].tokens / seq, cap);
    if (instances[i] < cap)
      remainders[i] = static_cast<double>(all[i].tokens % seq) / static_cast<double>(seq);
  }
  auto granted = [&] {
    std::uint64_t n = 0;
    for (auto v : instances) n += v;
    return n;
  };
  auto has_room = [&](std::size_t i) { return instances[i] < all[i].max_tokens / seq; };
  if (granted() < out.requested_instances) {
    std::vector<std::size_t> eligible;
    for (std::size_t i = 0; i < all.size(); ++i)
      if (has_room(i)) eligible.push_back(i);
    if (!eligible.empty()) {
      const std::uint64_t base = (out.requested_instances - granted()) / eligible.size();
      for (std::size_t i : eligible)
        instances[i] += std::min(base, all[i].max_tokens / seq - instances[i]);
      const std::uint64_t got = granted();
      if (got < out.requested_instances) {
        std::vector<std::pair<double, std::size_t>> candidates;
        for (std::size_t i : eligible)
          if (has_room(i)) candidates.emplace_back(remainders[i], i);
        std::sort(candidates.begin(), candidates.end(),
                  [](const auto& a, const auto& b) { return a > b; });
        const std::uint64_t more = out.requested_instances - got;
        for (std::size_t k = 0; k < candidates.size() && k < more; ++k)
          ++instances[candidates[k].second];
      }
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::uint64_t tokens = instances[i] * seq;
    out.sources[all[i].source].selected += tokens;
    if (tokens > 0)
      out.entries.push_back({all[i].path, config.sources[all[i].source].name, tokens});
  }
  TANDEM_CHECK(!out.entries.empty(), "{}: the mixture selects no complete instance of {} tokens",
               where, sequence_length);
  return out;
}

}  // namespace tandem::data
