// OLMo-core's loss normalisation for micro-batch accumulation (train_module.train_batch):
// each micro-batch's loss is its SUM of per-token CE (and z-loss) divided by the number of
// non-ignored labels in the whole local batch, so the micro-batches add up to the batch mean.
//   labels     = input ids shifted left by one; the last position of each instance is -100;
//                so is the label of a token whose label mask is 0 (padding of packed data);
//                every label of an instance rejected by the instance filter is -100.
//   divisor    = #labels != -100 + seq_len * #rejected instances (their tokens count as
//                zero-loss tokens, OLMo-core's deliberate simplification).
//   loss_mb    = (ce_sum_mb + z_loss_multiplier * z_sum_mb) / divisor, with
//                z_sum = sum over non-ignored tokens of logsumexp(logits)^2 (computed by the
//                lm-head kernel, which also takes 1 / divisor as its gradient scale).
//   CE loss    = sum over micro-batches of ce_sum_mb / divisor (what the skip-step rule sees);
//   Z loss     = sum over micro-batches of z_loss_multiplier * z_sum_mb / divisor.
// Data-parallel ranks then average their gradients and losses.
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/ignore_index.h"

namespace tandem::optim {

// Ignored labels are core::kIgnoreIndex (-100).
constexpr double kOlmoZLossMultiplier = 1e-5;

// labels[rows * seq_len] from input_ids[rows * seq_len]. `instance_keep` (rows values, 0 = rejected
// by the instance filter) and `label_mask` (rows * seq_len values, 0 = not a label, as OLMo-core's
// label_mask) may be null.
std::vector<std::int64_t> make_labels(const std::int64_t* input_ids, std::int64_t rows,
                                      std::int64_t seq_len, const std::uint8_t* instance_keep,
                                      const std::uint8_t* label_mask = nullptr);

// The loss divisor of a whole local batch (all its micro-batches).
std::int64_t loss_divisor(const std::int64_t* labels, std::int64_t rows, std::int64_t seq_len,
                          const std::uint8_t* instance_keep);

// Accumulates micro-batch sums into the batch's reported losses.
class BatchLoss {
 public:
  BatchLoss(std::int64_t divisor, double z_loss_multiplier);
  // Adds one micro-batch's sums (as returned by the cross-entropy kernel).
  void add_micro_batch(double ce_sum, double z_sum);
  // The factor the kernel multiplies the micro-batch gradient by.
  float grad_scale() const { return static_cast<float>(1.0 / static_cast<double>(divisor_)); }
  double ce_loss() const { return ce_; }
  double z_loss() const { return z_; }
  double total_loss() const { return ce_ + z_; }
  std::int64_t divisor() const { return divisor_; }

 private:
  std::int64_t divisor_;
  double z_loss_multiplier_;
  double ce_ = 0.0;
  double z_ = 0.0;
};

}  // namespace tandem::optim
