// ZeRO-1 for data-parallel training: each rank keeps the Adam moments of one contiguous range of
// the flat parameter buffer only (1/W of them). Per step: gradients reduce-scattered (each rank
// gets the rank-ordered sum of its range, as the replicated all-reduce would give), the global
// norm from the ranks' partial sums of squares, clipping and AdamW on the range, then the updated
// parameters all-gathered. AdamW updates every element independently, so the result equals the
// replicated optimiser's up to the order of the norm's partial sums.
//
// Checkpoints: each rank writes the moments of its range as its own shard (moment_ranges()), and
// reads its range at any W' from whichever shards hold it (train/optimizer_shards.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/grad_clip.h"

namespace tandem {

class Zero1Optimizer {
 public:
  // `full` describes every parameter (pointers into one flat buffer starting at `params`/`grads`
  // of `buffer_size` floats), in registration order.
  Zero1Optimizer(const std::vector<optim::ParamBuffer>& full, float* params, float* grads,
                 std::size_t buffer_size, const optim::AdamWHyper& hyper, Communicator& comm);

  // Sums the gradients over ranks into this rank's range and divides them by W.
  void reduce_gradients();
  // Global pre-clip L2 norm of the (reduced) gradients; clips this rank's range when
  // max_norm > 0.
  double clip(double max_norm);
  // AdamW on this rank's range, then every rank receives every updated parameter.
  void step(double lr);
  // A skipped step still has to leave the parameters identical on every rank: nothing to do,
  // since no rank changed them.

  // This rank's moments, one run per parameter its range touches (read/write access).
  struct MomentRange {
    std::size_t param_index;  // in the `full` list given to the constructor
    std::size_t start;        // element offset inside that parameter
    std::span<float> exp_avg, exp_avg_sq;
  };
  std::vector<MomentRange> moment_ranges();
  std::int64_t step_count() const { return shard_->step_count(); }
  void set_step_count(std::int64_t step) { shard_->set_step_count(step); }

  std::size_t moment_bytes() const { return 2 * sizeof(float) * shard_->total_size(); }
  std::size_t full_moment_bytes() const { return 2 * sizeof(float) * full_size_; }

 private:
  // One parameter's part inside this rank's range.
  struct Piece {
    std::size_t param_index;  // in `full_`
    std::size_t start;        // element offset inside that parameter
    std::size_t length;
  };

  std::vector<optim::ParamBuffer> full_;
  float* params_;
  float* grads_;
  std::size_t buffer_size_;
  std::size_t full_size_ = 0;  // total parameter elements
  optim::AdamWHyper hyper_;
  Communicator& comm_;
  std::vector<std::size_t> offsets_;  // rank r owns [offsets_[r], offsets_[r + 1]) of the buffer
  std::vector<Piece> pieces_;
  std::vector<optim::GradBuffer> shard_grads_;
  std::unique_ptr<optim::AdamW> shard_;
};

}  // namespace tandem
