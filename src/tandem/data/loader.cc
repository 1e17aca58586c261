#include "tandem/data/loader.h"

#include "tandem/core/error.h"
#include "tandem/data/repetition_filter.h"

namespace tandem::data {

Loader::Loader(const DataConfig& config, LoaderOptions options)
    : Loader(config, std::make_shared<TokenDataset>(config), options) {}

Loader::Loader(const DataConfig& config, std::shared_ptr<const TokenDataset> dataset,
               LoaderOptions options)
    : config_(config), options_(options), dataset_(std::move(dataset)) {
  auto ipb = static_cast<std::uint64_t>(config_.instances_per_batch());
  TANDEM_CHECK(ipb > 0, "global_batch_size {} holds no instance of {} tokens",
               config_.global_batch_size, config_.sequence_length);
  batches_per_epoch_ = dataset_->num_instances() / ipb;
  if (config_.chunk_size() > 1)
    batches_per_epoch_ =
        (dataset_->num_instances() / config_.chunk_size() * config_.chunk_size()) / ipb;
  TANDEM_CHECK(batches_per_epoch_ > 0,
               "the data holds {} instances of {} tokens, fewer than one global batch of {}",
               dataset_->num_instances(), config_.sequence_length, ipb);
  state_ = initial_state(config_, *dataset_);
}

Loader::~Loader() { stop_prefetch(); }

std::shared_ptr<const EpochPlan> Loader::plan(std::uint64_t epoch) const {
  std::lock_guard<std::mutex> lock(plan_mutex_);
  if (!cached_plan_ || cached_plan_->epoch() != epoch)
    cached_plan_ = std::make_shared<EpochPlan>(config_, dataset_->num_instances(), epoch);
  return cached_plan_;
}

Batch Loader::build_batch(std::uint64_t epoch, std::uint64_t step, std::uint64_t rank,
                          std::uint64_t world_size) const {
  check_rank(config_, rank, world_size);
  auto p = plan(epoch);
  Batch b;
  b.epoch = epoch;
  b.step = step;
  b.rank = rank;
  b.world_size = world_size;
  b.sequence_length = config_.sequence_length;
  b.instance_ids = p->rank_share(step, rank, world_size);
  if (options_.fault == LoaderFault::kDoubleShard) {
    std::vector<std::uint64_t> resliced;
    for (std::size_t i = rank; i < b.instance_ids.size(); i += world_size)
      resliced.push_back(b.instance_ids[i]);
    b.instance_ids = std::move(resliced);
  }
  if (!options_.read_tokens) return b;

  const std::size_t seq = static_cast<std::size_t>(config_.sequence_length);
  const std::size_t n = b.instance_ids.size();
  b.input_ids.resize(n * seq);
  b.instance_mask.assign(n, 1);
  if (dataset_->has_label_masks()) b.label_mask.resize(n * seq);
  const bool given_documents = config_.generate_doc_lengths && dataset_->documents_from_metadata();
  if (given_documents) b.document_starts.resize(n * seq);
  for (std::size_t i = 0; i < n; ++i) {
    std::span<std::int64_t> ids(b.input_ids.data() + i * seq, seq);
    std::span<std::uint8_t> mask;
    if (!b.label_mask.empty()) mask = std::span<std::uint8_t>(b.label_mask.data() + i * seq, seq);
    dataset_->read_instance(b.instance_ids[i], ids, mask);
    if (given_documents)
      dataset_->document_starts(b.instance_ids[i],
                                std::span(b.document_starts.data() + i * seq, seq));
    if (config_.instance_filter && is_rejected_by_repetition(ids, *config_.instance_filter))
      b.instance_mask[i] = 0;
  }
  return b;
}

Batch Loader::next_batch(std::uint64_t rank, std::uint64_t world_size) {
  check_rank(config_, rank, world_size);
  Batch batch;
  if (options_.prefetch) {
    if (!prefetching_ || rank != prefetch_rank_ || world_size != prefetch_world_) {
      stop_prefetch();
      start_prefetch(rank, world_size);
    }
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      slot = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();
    if (slot.error) {
      stop_prefetch();  // the next call retries from the same position
      std::rethrow_exception(slot.error);
    }
    batch = std::move(slot.batch);
  } else {
    batch = build_batch(state_.epoch, state_.batches_processed, rank, world_size);
  }
  // Advance the delivered position; roll over to a new epoch after its last full batch.
  state_.batches_processed += 1;
  state_.tokens_processed += static_cast<std::uint64_t>(config_.global_batch_size);
  if (state_.batches_processed >= batches_per_epoch_) {
    state_.epoch += 1;
    state_.batches_processed = 0;
    state_.tokens_processed = 0;
  }
  return batch;
}

LoaderState Loader::state() const { return state_; }

void Loader::restore(const LoaderState& saved) {
  stop_prefetch();
  state_ =
      check_resume(saved, initial_state(config_, *dataset_), config_.ignore_fingerprint_mismatch);
  if (state_.batches_processed >= batches_per_epoch_) {
    state_.epoch += 1;
    state_.batches_processed = 0;
    state_.tokens_processed = 0;
  }
}

void Loader::start_prefetch(std::uint64_t rank, std::uint64_t world_size) {
  stop_ = false;
  prefetching_ = true;
  prefetch_rank_ = rank;
  prefetch_world_ = world_size;
  worker_ = std::thread([this, e = state_.epoch, s = state_.batches_processed, rank, world_size] {
    prefetch_loop(e, s, rank, world_size);
  });
}

void Loader::stop_prefetch() {
  if (!prefetching_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  queue_.clear();
  prefetching_ = false;
}

void Loader::prefetch_loop(std::uint64_t epoch, std::uint64_t step, std::uint64_t rank,
                           std::uint64_t world_size) {
  const std::size_t depth = static_cast<std::size_t>(config_.prefetch_batches);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || queue_.size() < depth; });
      if (stop_) return;
    }
    Slot slot;
    try {
      slot.batch = build_batch(epoch, step, rank, world_size);
    } catch (...) {
      slot.error = std::current_exception();
    }
    bool failed = static_cast<bool>(slot.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(slot));
    }
    cv_.notify_all();
    if (failed) return;
    if (++step >= batches_per_epoch_) {
      ++epoch;
      step = 0;
    }
  }
}

}  // namespace tandem::data
