// AI2's held-out evaluation: OLMo-core's LMEvaluator (the `lm_evaluator` callback of the OLMo 3
// scripts) over per-document padded instances (data/padded_dataset.h), for sets laid out like
// AI2's v3 small perplexity validation sets.
//
// What OLMo-core does, and this reproduces:
//  - every set's files go into one NumpyPaddedFSLDataset, in set order;
//  - the evaluator's loader visits the instances in numpy's order arange(n) shuffled with
//    seed + 1 (deterministic evaluators reshuffle with epoch 1) and drops the tail that does not
//    fill a whole eval batch (batch_size tokens over all ranks = rank_microbatch_size x
//    data-parallel world size in OLMo-core);
//  - per set, the loss is a mean over the instances' label-mask positions of the un-reduced CE:
//    an instance of L real tokens adds its L - 1 next-token losses and a count of L (the last
//    real position predicts padding or nothing, has an ignored label and a loss of 0, and is
//    still inside the label mask). PPL = exp(loss).
//
// YAML (`evaluation.padded:`, strict keys):
//   mix: data/mixes/v3-small-ppl-validation.txt  # OLMo-core's manifest (label,path lines), read
//   mix_base_dir: data/ai2-llm                   # as from_data_mix reads it (data/data_mix.h)
//   mix_tokenizer_id: dolma2-tokenizer           # {TOKENIZER} (DataMix.build's id for dolma2)
//   root: DIR            # one set per folder: DIR/<name>/val/*.npy, labelled "<name>-validation"
//                        # (folders and files sorted, which is the order of OLMo-core's
//                        # v3-small-ppl-validation mix)
//   sets:                # and/or explicit sets
//     - {label: c4_en-validation, paths: [.../c4_en/val/*.npy]}
//   sequence_length: 8192  # default: data.sequence_length
//   batch_size: 16384      # tokens per eval batch over all ranks; default: one instance
//   seed: 0                # the evaluator loader's seed
//   batch_instances: 8     # instances per forward pass here (memory only, no effect on results)
// Metrics: eval/<label>/loss and eval/<label>/ppl (OLMo-core: eval/lm/<label>/CE loss, /PPL).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/data/data_config.h"
#include "tandem/data/padded_dataset.h"
#include "tandem/eval/eval_ranks.h"
#include "tandem/io/config.h"
#include "tandem/model/olmo3_model.h"

namespace tandem::eval {

struct PaddedSetConfig {
  std::string label;
  std::vector<std::string> files;
};

struct PaddedHeldoutConfig {
  std::vector<PaddedSetConfig> sets;
  std::int64_t sequence_length = 0;  // 0 = the training data's
  std::int64_t batch_size = 0;       // tokens; 0 = sequence_length
  std::int64_t seed = 0;
  std::int64_t batch_instances = 8;
};

// Parses `evaluation.padded`; relative paths resolve against base_dir. Errors name the key.
PaddedHeldoutConfig parse_padded_heldout_config(io::ConfigSection section,
                                                const std::string& base_dir);

// The dataset settings: the training data's EOS, pad, vocabulary and dtype (the held-out files
// are tokenized as the training data is), the sequence length from the config or the data.
data::PaddedDatasetOptions padded_dataset_options(const PaddedHeldoutConfig& config,
                                                  const data::DataConfig& train_data);

// The sets of an AI2-style folder: DIR/<name>/val/*.npy -> "<name>-validation", sorted.
std::vector<PaddedSetConfig> discover_padded_sets(const std::string& root);

struct PaddedSetResult {
  std::string label;
  double loss = 0.0;
  double perplexity = 0.0;
  std::int64_t instances = 0;  // evaluated (after the loader's tail drop)
  std::int64_t tokens = 0;     // label-mask positions counted (OLMo-core's weight)
};

class PaddedHeldout {
 public:
  // Opens every set (sequence_length resolved by the caller); throws Error naming the file.
  PaddedHeldout(const PaddedHeldoutConfig& config, const data::PaddedDatasetOptions& options);
  // Every set's batches spread over `ranks` (eval_ranks.h: the same result on any number).
  std::vector<PaddedSetResult> evaluate(model::Olmo3Model& model,
                                        const EvalRanks& ranks = EvalRanks()) const;
  // The global instance indices the evaluator reads, in order (after the tail drop).
  const std::vector<std::uint32_t>& order() const { return order_; }
  const data::PaddedDataset& dataset() const { return *dataset_; }

 private:
  PaddedHeldoutConfig config_;
  std::unique_ptr<data::PaddedDataset> dataset_;
  std::vector<std::uint32_t> order_;
};

}  // namespace tandem::eval
