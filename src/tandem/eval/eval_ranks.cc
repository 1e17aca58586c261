#include "tandem/eval/eval_ranks.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::eval {

std::vector<std::vector<double>> EvalRanks::run(
    model::Olmo3Model& model, const std::vector<EvalBatch>& batches,
    const std::function<std::vector<double>(std::size_t)>& run_batch) const {
  const auto W = static_cast<std::size_t>(world_size());
  const auto me = static_cast<std::size_t>(rank());
  const bool padded_passes = W > 1 && model.sharded() != nullptr;
  std::vector<std::size_t> offsets(batches.size() + 1, 0);
  for (std::size_t k = 0; k < batches.size(); ++k) offsets[k + 1] = offsets[k] + batches[k].results;
  // Zeros where other ranks' batches go: the sum over ranks is then each value exactly.
  std::vector<double> all(offsets.back(), 0.0);
  for (std::size_t round = 0; round * W < batches.size(); ++round) {
    std::int64_t passes = 0, done = 0;
    for (std::size_t k = round * W; k < std::min(batches.size(), (round + 1) * W); ++k)
      passes = std::max(passes, model.forward_only_passes(batches[k].rows, batches[k].tokens));
    if (const std::size_t k = round * W + me; k < batches.size()) {
      const std::vector<double> values = run_batch(k);
      TANDEM_CHECK(values.size() == batches[k].results,
                   "evaluation batch {}: {} results where {} were announced", k, values.size(),
                   batches[k].results);
      std::copy(values.begin(), values.end(),
                all.begin() + static_cast<std::ptrdiff_t>(offsets[k]));
      done = model.forward_only_passes(batches[k].rows, batches[k].tokens);
      ++count_.here;
    }
    if (padded_passes)
      for (; done < passes; ++done) model.forward_only_padding_pass();
  }
  count_.all += static_cast<std::int64_t>(batches.size());
  if (W > 1 && !all.empty()) comm_->all_reduce_sum(all.data(), all.size());
  std::vector<std::vector<double>> out(batches.size());
  for (std::size_t k = 0; k < batches.size(); ++k)
    out[k].assign(all.begin() + static_cast<std::ptrdiff_t>(offsets[k]),
                  all.begin() + static_cast<std::ptrdiff_t>(offsets[k + 1]));
  return out;
}

}  // namespace tandem::eval
