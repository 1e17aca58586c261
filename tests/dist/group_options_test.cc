// Parameter groups with their own AdamW options (optim.group_overrides with lr, betas, eps) under
// every sharding of the optimiser: ZeRO-1 and FSDP shard the parameters into pieces, each of which
// must take its parameter's group options and lr. Two ranks of each give the run of one process:
// losses within the 1e-5 of the data-parallel tests (only the order of the gradient sums
// differs), the same per-group learning rates, and final weights within 1e-5 relative L2 per
// tensor, where the groups' options move the embedding and the norms by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dist_test_util.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

using namespace dist_testing;

TEST(DataParallel, GroupOptionsHoldUnderEveryStrategy) {
  const int steps = 10;
  // The embedding at 3x the lr with betas of its own; the norms with their own eps and no decay.
  const std::string groups =
      " 'optim.group_overrides=[{params: [embeddings.weight], opts: {lr: 3.0e-3, betas: [0.8, "
      "0.99]}}, {params: [\"*norm*\"], opts: {eps: 1.0e-5, weight_decay: 0.0}}]'";
  const std::string single = temp_dir("dist_groups_w1");
  auto r = run_shell(tandem_command(1, "train " + train_args(single, steps) + groups));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> base = read_metrics(single);
  ASSERT_EQ(base.size(), static_cast<std::size_t>(steps));
  ASSERT_TRUE(base[4].contains("lr/group_overrides[0]"));
  EXPECT_EQ(base[4]["lr/group_overrides[0]"].get<double>(), 3 * base[4]["lr"].get<double>());

  const model::ModelWeights want =
      model::read_model_weights(single + "/checkpoints/step-000010/model");
  const model::ParameterLayout layout(want.config);
  // The largest relative L2 distance of a tensor of `run`'s final weights from the one process's.
  auto weights_gap = [&](const std::string& run, const std::string& tensor) {
    const model::ModelWeights got =
        model::read_model_weights(run + "/checkpoints/step-000010/model");
    double worst = 0.0;
    for (const model::ParameterEntry& e : layout.entries()) {
      if (!tensor.empty() && e.name != tensor) continue;
      const std::vector<float> w(want.flat.begin() + e.offset,
                                 want.flat.begin() + e.offset + e.numel);
      worst = std::max(worst, testing::relative_l2(got.flat.data() + e.offset, w));
    }
    return worst;
  };

  for (const std::string strategy : {"ddp", "zero1", "fsdp"}) {
    const std::string run = temp_dir("dist_groups_" + strategy);
    r = run_shell(tandem_command(
        2, "train " + train_args(run, steps) + groups + " dist.strategy=" + strategy));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<nlohmann::json> got = read_metrics(run);
    expect_close_losses(base, got, 0, strategy + " at W=2 vs one process");
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i]["lr/group_overrides[0]"], base[i]["lr/group_overrides[0]"]) << strategy;
    EXPECT_LE(weights_gap(run, ""), 1e-5) << strategy;
  }
  // Without the groups the embedding and a norm end far beyond that bound: the options are what
  // the comparison above checks.
  const std::string plain = temp_dir("dist_groups_none");
  r = run_shell(tandem_command(1, "train " + train_args(plain, steps)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(weights_gap(plain, "embeddings.weight"), 1e-3);
  EXPECT_GT(weights_gap(plain, "blocks.0.attention_norm.weight"), 1e-4);
}

}  // namespace
}  // namespace tandem
