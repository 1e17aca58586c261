// The bf16 precision policy against HF transformers' Olmo3ForCausalLM cast with
// `model.to(torch.bfloat16)` (eager attention), on fixtures from tools/make_bf16_model_fixtures.py:
// three briefly trained small models (GQA; window smaller than the sequence; 6 layers).
// Bounds from the issue: per-token KL <= 1e-3 against HF's bf16 logits (MaxText's reproduction
// measured ~1.5e-3 on its converted 7B) and top-1 agreement >= 0.99. tandem's bf16 against HF's
// fp32 is reported and held to the same KL bound. Gradients: HF's own bf16 gradients are off its
// fp32 ones by up to a few percent (meta.json records it per tensor); tandem's bf16 gradients
// must be no further than twice HF's worst from HF's fp32 gradients, and from HF's bf16 ones (the
// distance between two bf16 runs is at most the sum of their distances to fp32).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

class Bf16Parity : public ::testing::TestWithParam<const char*> {};

TEST_P(Bf16Parity, LogitsAndGradientsMatchTransformersInBf16) {
  const std::string dir = testing::fixture(std::string("model/bf16/") + GetParam());
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  const double hf_grad_error = meta["hf_bf16_vs_fp32"]["max_grad_rel_l2"].get<double>();
  ASSERT_GT(hf_grad_error, 0.0);

  auto model = model::load_model(dir, testing::cpu_backend());
  model->set_precision(model::Precision::kBf16);
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data());

  eval::LogitParity vs_bf16 =
      eval::compare_logits(logits, V, io::read_npy(dir + "/logits_bf16.npy").as_f32(), V);
  eval::LogitParity vs_fp32 =
      eval::compare_logits(logits, V, io::read_npy(dir + "/logits.npy").as_f32(), V);
  EXPECT_LE(vs_bf16.max_kl, 1e-3);
  EXPECT_GE(vs_bf16.top1_agreement, 0.99);
  EXPECT_LE(vs_fp32.max_kl, 1e-3);
  EXPECT_GE(vs_fp32.top1_agreement, 0.99);
  EXPECT_GT(vs_bf16.max_ref_abs, 3.0) << "reference logits are not peaked";
  // Not identical to either: the logits really went through bf16.
  EXPECT_GT(vs_fp32.max_kl, 1e-8);
  RecordProperty("max_kl_vs_hf_bf16", std::to_string(vs_bf16.max_kl));
  RecordProperty("max_kl_vs_hf_fp32", std::to_string(vs_fp32.max_kl));
  std::printf(
      "%s: KL vs HF bf16 max %.3e mean %.3e top-1 %.4f; vs HF fp32 max %.3e mean %.3e "
      "top-1 %.4f\n",
      GetParam(), vs_bf16.max_kl, vs_bf16.mean_kl, vs_bf16.top1_agreement, vs_fp32.max_kl,
      vs_fp32.mean_kl, vs_fp32.top1_agreement);

  for (const char* ref : {"grads.safetensors", "grads_bf16.safetensors"}) {
    eval::GradParity g = eval::compare_gradients(*model, ids, B, T, dir + "/" + ref);
    EXPECT_EQ(g.rel_l2.size(), model->layout().entries().size());
    for (const auto& [name, rel] : g.rel_l2)
      EXPECT_LE(rel, 2.0 * hf_grad_error) << ref << " " << name;
    std::printf("%s: max gradient rel L2 vs %s %.3e (HF bf16 vs fp32: %.3e)\n", GetParam(), ref,
                g.max_rel_l2, hf_grad_error);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16Parity, ::testing::Values("gqa", "window", "deep"),
                         testing::ParamName());

TEST(Bf16Model, Fp32PathIsUntouchedAndActivationsHalve) {
  auto model = model::load_model(testing::fixture("model/bf16/deep"), testing::cpu_backend());
  const std::int64_t fp32_bytes = model->activation_bytes(1024);
  EXPECT_EQ(model->compute_weight_bytes(), 0);
  model->set_precision(model::Precision::kBf16);
  const std::int64_t bf16_bytes = model->activation_bytes(1024);
  EXPECT_LT(bf16_bytes, fp32_bytes * 6 / 10);  // statistics stay f32
  EXPECT_GT(bf16_bytes, fp32_bytes / 2);
  // Every parameter but the embedding table (looked up from the f32 masters) has a bf16 copy.
  const model::ParameterEntry& emb = model->layout().entry("embeddings.weight");
  EXPECT_EQ(model->compute_weight_bytes(), (model->layout().total() - emb.offset - emb.numel) * 2);
}

TEST(Bf16Model, ComputeWeightsFollowTheMastersBetweenSteps) {
  // A forward outside a step sees the masters as they are now; inside a step the copy made by
  // the first forward serves every micro-batch.
  auto model = model::load_model(testing::fixture("model/bf16/gqa"), testing::cpu_backend());
  model->set_precision(model::Precision::kBf16);
  io::NpyArray ids_arr = io::read_npy(testing::fixture("model/bf16/gqa/ids.npy"));
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t T = ids_arr.shape[1], V = model->config().embedding_size;
  std::vector<float> a(static_cast<std::size_t>(T * V)), b(a.size());
  model->forward_logits(ids.data(), 1, T, a.data());
  std::vector<float> flat = model->params_to_host();
  for (float& x : flat) x *= 1.5f;
  model->params_from_host(flat);
  model->forward_logits(ids.data(), 1, T, b.data());
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace tandem
