#include "tandem/optim/loss_normalization.h"

#include "tandem/core/error.h"

namespace tandem::optim {

std::vector<std::int64_t> make_labels(const std::int64_t* input_ids, std::int64_t rows,
                                      std::int64_t seq_len, const std::uint8_t* instance_keep,
                                      const std::uint8_t* label_mask) {
  TANDEM_CHECK(rows >= 0 && seq_len > 0, "make_labels: bad shape [{}, {}]", rows, seq_len);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows * seq_len), core::kIgnoreIndex);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (instance_keep && !instance_keep[r]) continue;
    const std::int64_t* ids = input_ids + r * seq_len;
    std::int64_t* out = labels.data() + r * seq_len;
    const std::uint8_t* mask = label_mask ? label_mask + r * seq_len : nullptr;
    for (std::int64_t t = 0; t + 1 < seq_len; ++t)
      if (!mask || mask[t + 1]) out[t] = ids[t + 1];
  }
  return labels;
}

std::int64_t loss_divisor(const std::int64_t* labels, std::int64_t rows, std::int64_t seq_len,
                          const std::uint8_t* instance_keep) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < rows * seq_len; ++i) count += labels[i] != core::kIgnoreIndex;
  if (instance_keep)
    for (std::int64_t r = 0; r < rows; ++r) count += instance_keep[r] ? 0 : seq_len;
  return count;
}

BatchLoss::BatchLoss(std::int64_t divisor, double z_loss_multiplier)
    : divisor_(divisor), z_loss_multiplier_(z_loss_multiplier) {
  TANDEM_CHECK(divisor > 0, "loss normalisation: the batch has no label to learn from");
  TANDEM_CHECK(z_loss_multiplier >= 0.0, "loss normalisation: z_loss_multiplier must be >= 0");
}

void BatchLoss::add_micro_batch(double ce_sum, double z_sum) {
  const auto d = static_cast<double>(divisor_);
  ce_ += ce_sum / d;
  z_ += z_loss_multiplier_ * z_sum / d;
}

}  // namespace tandem::optim
