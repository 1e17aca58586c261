// Held-out LM evaluation: mean next-token cross-entropy and perplexity of a model on named
// validation sets (token files never trained on), over a fixed set of instances (the first
// max_instances of each set in file order) so that successive evaluations are comparable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/data/token_dataset.h"
#include "tandem/eval/eval_ranks.h"
#include "tandem/model/olmo3_model.h"

namespace tandem::eval {

struct HeldoutSet {
  std::string name;
  std::shared_ptr<const data::TokenDataset> dataset;
  std::int64_t instances = 0;  // evaluated: min(max_instances, dataset instances)
  // The training data's intra-document masking (data.generate_doc_lengths), applied here too so
  // the held-out loss is the trained model function's.
  bool intra_document = false;
  std::int64_t eos_token_id = 0;
  std::optional<std::int64_t> bos_token_id;
};

struct HeldoutResult {
  std::string name;
  double loss = 0.0;  // mean CE over every predicted token (last position of an instance excluded)
  double perplexity = 0.0;
  std::int64_t tokens = 0;
};

// Opens a validation set with the training data's sequence length, dtype and vocab.
HeldoutSet open_heldout_set(const std::string& name, const std::vector<std::string>& files,
                            const data::DataConfig& train_data, std::int64_t max_instances);

// Every set in batches of `batch` instances, the sets' batches shared out over `ranks` as one
// list (eval_ranks.h: the same results on any number of ranks).
std::vector<HeldoutResult> evaluate_heldout(model::Olmo3Model& model,
                                            const std::vector<HeldoutSet>& sets, std::int64_t batch,
                                            const EvalRanks& ranks = EvalRanks());
HeldoutResult evaluate_heldout(model::Olmo3Model& model, const HeldoutSet& set, std::int64_t batch,
                               const EvalRanks& ranks = EvalRanks());

}  // namespace tandem::eval
