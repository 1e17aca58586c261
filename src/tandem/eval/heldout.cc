#include "tandem/eval/heldout.h"

#include "tandem/optim/loss_normalization.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/model/documents.h"

namespace tandem::eval {

HeldoutSet open_heldout_set(const std::string& name, const std::vector<std::string>& files,
                            const data::DataConfig& train_data, std::int64_t max_instances) {
  // Held-out sets are fixed windows of their own files, read with the training data's sequence
  // length and token ids and nothing else of its config: its packing, label masks, permutation,
  // mixture, chunking and filter are not theirs (evaluation scores every instance).
  data::DataConfig c;
  c.sources = {data::DataSource{name, files, files}};
  c.sequence_length = train_data.sequence_length;
  c.vocab_size = train_data.vocab_size;
  c.dtype = train_data.dtype;
  c.eos_token_id = train_data.eos_token_id;
  c.pad_token_id = train_data.pad_token_id;
  c.bos_token_id = train_data.bos_token_id;
  c.validate_token_ids = train_data.validate_token_ids;
  HeldoutSet s;
  s.name = name;
  s.dataset = std::make_shared<data::TokenDataset>(c);
  s.instances =
      std::min<std::int64_t>(max_instances, static_cast<std::int64_t>(s.dataset->num_instances()));
  TANDEM_CHECK(s.instances > 0, "validation set '{}' has no complete instance of {} tokens", name,
               c.sequence_length);
  s.intra_document = train_data.generate_doc_lengths;
  s.eos_token_id = train_data.eos_token_id;
  s.bos_token_id = train_data.bos_token_id;
  return s;
}

std::vector<HeldoutResult> evaluate_heldout(model::Olmo3Model& model,
                                            const std::vector<HeldoutSet>& sets, std::int64_t batch,
                                            const EvalRanks& ranks) {
  TANDEM_CHECK(batch > 0, "held-out sets: batch of {} instances", batch);
  std::vector<EvalBatch> batches;
  std::vector<std::pair<std::size_t, std::int64_t>> slices;  // (set, first instance)
  for (std::size_t s = 0; s < sets.size(); ++s) {
    const std::int64_t T = sets[s].dataset->sequence_length();
    for (std::int64_t first = 0; first < sets[s].instances; first += batch) {
      batches.push_back({std::min(batch, sets[s].instances - first), T, 2});
      slices.emplace_back(s, first);
    }
  }
  auto run_batch = [&](std::size_t k) {
    const HeldoutSet& set = sets[slices[k].first];
    const std::int64_t first = slices[k].second, B = batches[k].rows, T = batches[k].tokens;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T), 0);
    for (std::int64_t b = 0; b < B; ++b)
      set.dataset->read_instance(
          static_cast<std::uint64_t>(first + b),
          std::span<std::int64_t>(ids.data() + b * T, static_cast<std::size_t>(T)));
    std::vector<std::int64_t> labels = optim::make_labels(ids.data(), B, T, nullptr);
    std::vector<std::int64_t> doc_start;
    if (set.intra_document)
      doc_start = model::document_starts(ids.data(), B, T, set.eos_token_id, set.bos_token_id);
    model::LossSums s = model.forward_backward(ids.data(), labels.data(), B, T, 0.0f, 1.0f, false,
                                               set.intra_document ? doc_start.data() : nullptr);
    return std::vector<double>{s.ce_sum, static_cast<double>(s.count)};
  };
  const std::vector<std::vector<double>> sums = ranks.run(model, batches, run_batch);
  std::vector<HeldoutResult> results(sets.size());
  std::vector<double> ce(sets.size(), 0.0);
  // Summed in batch order, as one process evaluating every batch sums them.
  for (std::size_t k = 0; k < batches.size(); ++k) {
    ce[slices[k].first] += sums[k][0];
    results[slices[k].first].tokens += static_cast<std::int64_t>(sums[k][1]);
  }
  for (std::size_t s = 0; s < sets.size(); ++s) {
    HeldoutResult& r = results[s];
    r.name = sets[s].name;
    r.loss = ce[s] / static_cast<double>(r.tokens);
    r.perplexity = std::exp(r.loss);
  }
  return results;
}

HeldoutResult evaluate_heldout(model::Olmo3Model& model, const HeldoutSet& set, std::int64_t batch,
                               const EvalRanks& ranks) {
  return evaluate_heldout(model, std::vector<HeldoutSet>{set}, batch, ranks).front();
}

}  // namespace tandem::eval
