#include "tandem/optim/loss_normalization.h"

#include <gtest/gtest.h>

#include "fixture.h"
#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

std::vector<std::int64_t> flat(const nlohmann::json& rows) {
  std::vector<std::int64_t> out;
  for (const auto& r : rows)
    for (const auto& v : r) out.push_back(v.get<std::int64_t>());
  return out;
}

// OLMo-core's get_labels and train_batch's divisor, with and without rejected instances.
TEST(LossNormalizationParity, LabelsAndDivisorAsOlmoCore) {
  nlohmann::json f = testing::load_fixture("loss_normalization.json");
  const std::int64_t seq_len = f["seq_len"].get<std::int64_t>();
  std::vector<std::int64_t> ids = flat(f["input_ids"]);
  const std::int64_t rows = static_cast<std::int64_t>(ids.size()) / seq_len;
  std::vector<std::uint8_t> keep;
  for (const auto& k : f["instance_keep"]) keep.push_back(k.get<bool>());

  std::vector<std::int64_t> labels = make_labels(ids.data(), rows, seq_len, nullptr);
  EXPECT_EQ(labels, flat(f["labels"]));
  EXPECT_EQ(loss_divisor(labels.data(), rows, seq_len, nullptr), f["divisor"].get<std::int64_t>());

  std::vector<std::int64_t> masked = make_labels(ids.data(), rows, seq_len, keep.data());
  EXPECT_EQ(masked, flat(f["labels_with_mask"]));
  EXPECT_EQ(loss_divisor(masked.data(), rows, seq_len, keep.data()),
            f["divisor_with_mask"].get<std::int64_t>());
}

TEST(LossNormalization, MicroBatchesAddUpToTheBatchMean) {
  // 2 rows of 4 tokens -> 3 labels each -> divisor 6, split into two micro-batches of one row.
  std::vector<std::int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::int64_t> labels = make_labels(ids.data(), 2, 4, nullptr);
  EXPECT_EQ(labels, (std::vector<std::int64_t>{2, 3, 4, -100, 6, 7, 8, -100}));
  std::int64_t divisor = loss_divisor(labels.data(), 2, 4, nullptr);
  ASSERT_EQ(divisor, 6);
  BatchLoss loss(divisor, kOlmoZLossMultiplier);
  loss.add_micro_batch(/*ce_sum=*/6.0, /*z_sum=*/300.0);
  loss.add_micro_batch(/*ce_sum=*/12.0, /*z_sum=*/900.0);
  EXPECT_DOUBLE_EQ(loss.ce_loss(), 3.0);        // (6 + 12) / 6: the mean over all 6 labels
  EXPECT_DOUBLE_EQ(loss.z_loss(), 1e-5 * 200);  // 1e-5 * (300 + 900) / 6
  EXPECT_DOUBLE_EQ(loss.total_loss(), 3.0 + 2e-3);
  EXPECT_FLOAT_EQ(loss.grad_scale(), 1.0f / 6.0f);
}

TEST(LossNormalization, RejectedInstancesCountAsZeroLossTokens) {
  std::vector<std::int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::uint8_t> keep = {1, 0};
  std::vector<std::int64_t> labels = make_labels(ids.data(), 2, 4, keep.data());
  EXPECT_EQ(labels, (std::vector<std::int64_t>{2, 3, 4, -100, -100, -100, -100, -100}));
  EXPECT_EQ(loss_divisor(labels.data(), 2, 4, keep.data()), 3 + 4);  // the full row counts
}

TEST(LossNormalization, Errors) {
  EXPECT_THROW(BatchLoss(0, 1e-5), core::Error);
  EXPECT_THROW(BatchLoss(5, -1.0), core::Error);
  std::vector<std::int64_t> ids = {1};
  EXPECT_THROW(make_labels(ids.data(), 1, 0, nullptr), core::Error);
}

}  // namespace
}  // namespace tandem::optim
