// The op profile's FLOPs (kernels/op_profile.h) over a whole forward + backward of the model add up
// to exactly what the MFU counts (ModelConfig::flops_per_token times the tokens), so that a
// profile's per-op shares and rates are shares of the MFU's work: on a config with GQA, sliding
// windows shorter and longer than the sequence and a full-attention layer; with full recompute the
// profile also credits each block's second forward, which the MFU leaves out.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tandem/model/olmo3_model.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem {
namespace {

model::ModelConfig profiled_config() {
  return model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 48, n_layers: 4, n_heads: 4, n_kv_heads: 2, hidden_size: 80, "
                 "vocab_size: 90, embedding_size: 96, max_sequence_length: 64, "
                 "sliding_window: {pattern: [8, 40, 8, -1], "
                 "force_full_attention_on_first_layer: false}}"),
      "model"));
}

kernels::OpProfile profile_step(model::Recompute recompute) {
  std::unique_ptr<kernels::Backend> cpu = kernels::make_backend("cpu");
  model::Olmo3Model m(profiled_config(), *cpu);
  m.init_weights(3);
  m.set_recompute(recompute);
  const std::int64_t B = 2, T = 24;
  std::mt19937_64 rng(5);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 90);
  const std::vector<std::int64_t> labels = optim::make_labels(ids.data(), B, T, nullptr);
  cpu->start_op_profile();
  m.forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 0.5f, true);
  return cpu->finish_op_profile();
}

TEST(OpProfileFlops, AForwardBackwardCountsWhatTheMfuCounts) {
  const double expected = profiled_config().flops_per_token(24) * 2 * 24;
  const kernels::OpProfile p = profile_step(model::Recompute::kNone);
  double flops = 0.0;
  std::map<std::string, std::int64_t> calls;
  for (const kernels::OpTime& t : p.ops) {
    flops += t.flops;
    calls[t.op] = t.calls;
  }
  EXPECT_DOUBLE_EQ(flops, expected);
  // Every layer's attention forward and backward, and one fused head, were seen.
  EXPECT_EQ(calls["attention_forward"], 4);
  EXPECT_EQ(calls["attention_backward"], 4);
  EXPECT_EQ(calls["lm_head_cross_entropy"], 1);
}

TEST(OpProfileFlops, FullRecomputeAddsEachBlocksForwardOnce) {
  const model::ModelConfig c = profiled_config();
  const double tokens = 2 * 24;
  double block_forward = 0.0;  // per token: the blocks' projections and attention, forward
  for (std::int64_t w : c.layer_windows)
    block_forward += 4.0 * static_cast<double>(c.n_heads * c.head_dim *
                                               (w == 0 ? 24 : std::min<std::int64_t>(w, 24)));
  block_forward += 2.0 * static_cast<double>(c.matmul_params() - c.embedding_size * c.d_model);
  double flops = 0.0;
  for (const kernels::OpTime& t : profile_step(model::Recompute::kFull).ops) flops += t.flops;
  EXPECT_DOUBLE_EQ(flops, c.flops_per_token(24) * tokens + block_forward * tokens);
}

}  // namespace
}  // namespace tandem
