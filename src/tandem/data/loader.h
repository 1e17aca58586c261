// The data loader the trainer calls: OLMo-core's global batch order, this rank's share of each
// global batch, tokens, the packed data's label mask and the repetition filter's instance mask,
// prepared ahead of time
// by a background thread so that the trainer does not wait on I/O.
//
//   Loader loader(config);
//   loader.restore(saved_state);              // optional, any world size
//   Batch b = loader.next_batch(rank, world);  // train/train_step splits it into micro-batches
//   LoaderState s = loader.state();            // save with the checkpoint
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "tandem/data/batch_plan.h"
#include "tandem/data/data_config.h"
#include "tandem/data/loader_state.h"
#include "tandem/data/token_dataset.h"

namespace tandem::data {

// One rank's share of one global batch.
struct Batch {
  std::uint64_t epoch = 0;  // 1-based
  std::uint64_t step = 0;   // global batch index within the epoch
  std::uint64_t rank = 0;
  std::uint64_t world_size = 1;
  std::int64_t sequence_length = 0;
  std::vector<std::uint64_t> instance_ids;  // global instance ids, in order
  // Empty when the loader was built with read_tokens = false.
  std::vector<std::int64_t> input_ids;
  // 1 = kept, 0 = rejected by the instance (repetition) filter: its tokens stay in the batch and
  // its labels are ignored (train/train_step.h makes the labels).
  std::vector<std::uint8_t> instance_mask;
  // Per token, 0 = its label is ignored (a packed instance's padding, or masked by the data's
  // label_mask_paths). Empty when the data has neither: every label counts.
  std::vector<std::uint8_t> label_mask;
  // With generate_doc_lengths on data packed from metadata boundaries: per token, where its
  // document starts in its row (OLMo-core's doc_lens). Empty: the documents are found by scanning
  // each row for EOS (model/documents.h), which gives OLMo-core's doc_lens for all other data.
  std::vector<std::int64_t> document_starts;

  std::size_t num_instances() const { return instance_ids.size(); }
};

enum class LoaderFault {
  kNone,
  // Test hook reproducing the known double-sharding bug: each rank re-slices its already strided
  // share (share[r::W]), so data repeats across steps and some is never seen. Never use it for
  // training; it exists to show that the audit catches the bug.
  kDoubleShard,
};

struct LoaderOptions {
  bool read_tokens = true;  // false: instance ids only (the audit's fast path)
  bool prefetch = true;     // background thread; false: build each batch on demand
  LoaderFault fault = LoaderFault::kNone;
};

class Loader {
 public:
  explicit Loader(const DataConfig& config, LoaderOptions options = {});
  Loader(const DataConfig& config, std::shared_ptr<const TokenDataset> dataset,
         LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next global batch's share for `rank` of `world_size`. Moves to the next epoch (new
  // shuffle) after the last full batch. The prefetch follows the (rank, world_size) asked for.
  Batch next_batch(std::uint64_t rank, std::uint64_t world_size);

  LoaderState state() const;  // after the batches handed out so far (not the prefetched ones)
  // Continue from a saved state (refused if data/seed/sequence length changed, unless the
  // config sets ignore_fingerprint_mismatch).
  void restore(const LoaderState& saved);

  const TokenDataset& dataset() const { return *dataset_; }
  const DataConfig& config() const { return config_; }
  std::uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Plan for an epoch (the global order); cached for the current epoch.
  std::shared_ptr<const EpochPlan> plan(std::uint64_t epoch) const;
  // Builds the batch at (epoch, step) for rank/world directly, without touching the state.
  Batch build_batch(std::uint64_t epoch, std::uint64_t step, std::uint64_t rank,
                    std::uint64_t world_size) const;

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void start_prefetch(std::uint64_t rank, std::uint64_t world_size);
  void stop_prefetch();
  void prefetch_loop(std::uint64_t epoch, std::uint64_t step, std::uint64_t rank,
                     std::uint64_t world_size);

  DataConfig config_;
  LoaderOptions options_;
  std::shared_ptr<const TokenDataset> dataset_;
  std::uint64_t batches_per_epoch_ = 0;
  LoaderState state_;
  mutable std::mutex plan_mutex_;
  mutable std::shared_ptr<const EpochPlan> cached_plan_;

  // Prefetch machinery.
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Slot> queue_;
  bool stop_ = false;
  bool prefetching_ = false;
  std::uint64_t prefetch_rank_ = 0;
  std::uint64_t prefetch_world_ = 0;
};

}  // namespace tandem::data
