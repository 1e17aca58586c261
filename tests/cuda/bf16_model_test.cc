// The OLMo 3 model under the bf16 precision policy on the CUDA backend, with the bounds of
// tests/model/bf16_parity_test.cc: against HF transformers' bf16 model (`model.to(torch.bfloat16)`)
// on its three briefly trained fixtures, per-token KL <= 1e-3 and top-1 agreement >= 0.99 against
// HF's bf16 and fp32 logits, gradients within twice HF's own bf16-vs-fp32 distance of HF's fp32 and
// bf16 gradients; and against the CPU backend's bf16 model on the same weights and batch (both
// within that distance of HF's fp32 gradients, so within twice it of each other; losses within
// the training check's 1e-3 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

double hf_grad_error(const std::string& dir) {
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  return meta["hf_bf16_vs_fp32"]["max_grad_rel_l2"].get<double>();
}

class CudaBf16Parity : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaBf16Parity, LogitsAndGradientsMatchTransformersInBf16) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture(std::string("model/bf16/") + GetParam());
  const double hf_error = hf_grad_error(dir);
  ASSERT_GT(hf_error, 0.0);
  auto model = model::load_model(dir, gpu);
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
  EXPECT_GT(vs_fp32.max_kl, 1e-8) << "the logits did not go through bf16";
  RecordProperty("max_kl_vs_hf_bf16", std::to_string(vs_bf16.max_kl));
  RecordProperty("max_kl_vs_hf_fp32", std::to_string(vs_fp32.max_kl));
  for (const char* ref : {"grads.safetensors", "grads_bf16.safetensors"}) {
    eval::GradParity g = eval::compare_gradients(*model, ids, B, T, dir + "/" + ref);
    EXPECT_EQ(g.rel_l2.size(), model->layout().entries().size());
    for (const auto& [name, rel] : g.rel_l2) EXPECT_LE(rel, 2.0 * hf_error) << ref << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBf16Parity, ::testing::Values("gqa", "window", "deep"),
                         testing::ParamName());

TEST(CudaBf16Model, LossAndGradientsMatchTheCpuBackendInBf16) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture("model/bf16/deep");
  const double hf_error = hf_grad_error(dir);
  auto on_cpu = model::load_model(dir, testing::cpu_backend());
  auto on_gpu = model::load_model(dir, gpu);
  on_cpu->set_precision(model::Precision::kBf16);
  on_gpu->set_precision(model::Precision::kBf16);
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1], N = B * T;
  const std::vector<std::int64_t> labels = cuda_testing::next_token_labels(ids);
  const std::vector<std::int64_t> starts = cuda_testing::two_documents_per_row(B, T);
  const std::int64_t* const document_options[] = {nullptr, starts.data()};
  for (const std::int64_t* docs : document_options) {
    on_cpu->zero_grads();
    on_gpu->zero_grads();
    const auto a =
        on_cpu->forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 1.0f / N, true, docs);
    const auto b =
        on_gpu->forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 1.0f / N, true, docs);
    EXPECT_EQ(a.count, b.count);
    EXPECT_NEAR(b.ce_sum, a.ce_sum, 1e-3 * a.ce_sum) << (docs ? "documents" : "");
    EXPECT_NEAR(b.z_sum, a.z_sum, 2e-3 * a.z_sum) << (docs ? "documents" : "");  // z = lse^2
    const std::vector<float> ga = on_cpu->grads_to_host(), gb = on_gpu->grads_to_host();
    for (const model::ParameterEntry& e : on_cpu->layout().entries()) {
      const std::vector<float> x(ga.begin() + e.offset, ga.begin() + e.offset + e.numel);
      const std::vector<float> y(gb.begin() + e.offset, gb.begin() + e.offset + e.numel);
      EXPECT_LE(cuda_testing::rel_l2(y, x), 4.0 * hf_error)
          << e.name << (docs ? " (documents)" : "");
    }
  }
}

}  // namespace
}  // namespace tandem
