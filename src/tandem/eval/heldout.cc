#include "tandem/eval/heldout.h"

#include "tandem/optim/loss_normalization.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/model/documents.h"

namespace tandem::eval {

HeldoutSet open_heldout_set(const std::string& name, const std::vector<std::string>& files,
                            const data::DataConfig& train_data, std::int64_t max_instances) {
  data::DataConfig c = train_data;
  c.sources = {data::DataSource{name, files, files}};
  c.instance_filter.reset();  // evaluation scores every instance
  c.max_target_sequence_length.reset();
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

HeldoutResult evaluate_heldout(model::Olmo3Model& model, const HeldoutSet& set, std::int64_t batch,
                               const EvalRanks& ranks) {
  TANDEM_CHECK(batch > 0, "held-out set '{}': batch of {} instances", set.name, batch);
  const std::int64_t T = set.dataset->sequence_length();
  std::vector<EvalBatch> batches;
  for (std::int64_t first = 0; first < set.instances; first += batch)
    batches.push_back({std::min(batch, set.instances - first), T, 2});
  auto run_batch = [&](std::size_t k) {
    const std::int64_t first = static_cast<std::int64_t>(k) * batch, B = batches[k].rows;
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
  HeldoutResult r;
  r.name = set.name;
  double ce = 0.0;
  // Summed in batch order, as one process evaluating every batch sums them.
  for (const auto& v : ranks.run(model, batches, run_batch)) {
    ce += v[0];
    r.tokens += static_cast<std::int64_t>(v[1]);
  }
  r.loss = ce / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace tandem::eval
