// The op profile on the CUDA backend (events on its stream, read once at the end): over a bf16
// training step (forward + backward, gradient norm, AdamW) it records the same calls with the same
// FLOPs as the CPU backend's profile of the same step (the model issues the same ops on both), its
// device times are consistent (each >= 0, their sum within the span), and profiling leaves the
// step's results bit for bit unchanged. bench_gpu_train_step --profile reports it.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "cuda_test_util.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/grad_clip.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem {
namespace {

struct StepResult {
  double loss = 0.0, norm = 0.0;
  std::vector<float> params;
  kernels::OpProfile profile;
};

StepResult step(kernels::Backend& backend, bool profile) {
  const model::ModelConfig config = model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 64, n_layers: 5, n_heads: 4, n_kv_heads: 2, hidden_size: 96, "
                 "vocab_size: 120, embedding_size: 128, max_sequence_length: 64, "
                 "sliding_window: {pattern: [16, 16, -1], "
                 "force_full_attention_on_first_layer: false}}"),
      "model"));
  model::Olmo3Model m(config, backend, model::Precision::kBf16);
  m.init_weights(9);
  std::vector<optim::ParamBuffer> params;
  for (const model::ParameterEntry& e : m.layout().entries())
    params.push_back({e.name, m.param(e.name), m.grad(e.name), e.weight_decay});
  optim::AdamW adamw(backend, params, optim::AdamWHyper{});
  const std::int64_t B = 2, T = 40;
  std::mt19937_64 rng(13);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 120);
  const std::vector<std::int64_t> labels = optim::make_labels(ids.data(), B, T, nullptr);
  const kernels::Tensor grads[] = {m.grads()};
  StepResult r;
  if (profile) backend.start_op_profile();
  m.zero_grads();
  const kernels::LossSums s =
      m.forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 1.0f / (B * (T - 1)), true);
  r.norm = optim::clip_grad_norm(backend, grads, 1.0);
  adamw.step(1e-3);
  if (profile) r.profile = backend.finish_op_profile();
  r.loss = s.ce_sum;
  r.params = kernels::to_host_f32(backend, m.params());
  return r;
}

std::map<std::string, kernels::OpTime> by_name(const kernels::OpProfile& p) {
  std::map<std::string, kernels::OpTime> out;
  for (const kernels::OpTime& t : p.ops) out[t.op] = t;
  return out;
}

TEST(CudaOpProfile, TimesTheCpuBackendsCallsOnTheDeviceWithoutChangingTheStep) {
  REQUIRE_CUDA(gpu);
  std::unique_ptr<kernels::Backend> cpu = kernels::make_backend("cpu");
  const StepResult on_cpu = step(*cpu, true);
  const StepResult plain = step(gpu, false);
  const StepResult profiled = step(gpu, true);

  // The same calls and FLOPs, op by op.
  const auto cpu_ops = by_name(on_cpu.profile), gpu_ops = by_name(profiled.profile);
  ASSERT_EQ(gpu_ops.size(), cpu_ops.size());
  for (const auto& [op, t] : cpu_ops) {
    ASSERT_TRUE(gpu_ops.count(op)) << op;
    EXPECT_EQ(gpu_ops.at(op).calls, t.calls) << op;
    EXPECT_EQ(gpu_ops.at(op).flops, t.flops) << op;
  }
  for (const char* op :
       {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
        "lm_head_cross_entropy", "sums_of_squares", "adamw_updates"})
    EXPECT_TRUE(gpu_ops.count(op)) << op;

  // Device times: one stream runs one op at a time, so they fit in the span (float milliseconds
  // from the first event: a relative rounding of 2^-24 per mark).
  double sum = 0.0;
  for (const kernels::OpTime& t : profiled.profile.ops) {
    EXPECT_GE(t.seconds, 0.0) << t.op;
    sum += t.seconds;
  }
  EXPECT_GT(profiled.profile.span_seconds, 0.0);
  EXPECT_LE(sum, profiled.profile.span_seconds * (1.0 + 1e-5));
  EXPECT_EQ(profiled.profile.calls(), on_cpu.profile.calls());

  // Profiling records events and nothing else: the step's results are the same bits.
  EXPECT_EQ(profiled.loss, plain.loss);
  EXPECT_EQ(profiled.norm, plain.norm);
  ASSERT_EQ(profiled.params.size(), plain.params.size());
  EXPECT_EQ(
      std::memcmp(profiled.params.data(), plain.params.data(), plain.params.size() * sizeof(float)),
      0);
}

}  // namespace
}  // namespace tandem
