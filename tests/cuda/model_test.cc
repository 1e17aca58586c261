// The OLMo 3 model on the CUDA backend: against HF transformers' fixtures (the thresholds of
// tests/model/hf_parity_test.cc: per-token KL <= 1e-6, logits within 1e-4 x max|logit|, every
// gradient within 1e-4 relative L2), under intra-document masking (the explicit-mask fixture), and
// against the same model on the CPU backend: logits, loss and every gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/test_support.h"
#include "cuda_test_util.h"
#include "tandem/core/atomic_file.h"
#include "tandem/eval/parity.h"
#include "tandem/io/npy.h"
#include "tandem/model/documents.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

class CudaHfParity : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaHfParity, LogitsAndGradientsMatchTransformers) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture(std::string("model/") + GetParam());
  auto model = model::load_model(dir, gpu);
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data());
  eval::LogitParity p =
      eval::compare_logits(logits, V, io::read_npy(dir + "/logits.npy").as_f32(), V);
  EXPECT_LE(p.max_abs_diff, 1e-4 * p.max_ref_abs);
  EXPECT_LE(p.max_kl, 1e-6);
  EXPECT_EQ(p.top1_agreement, 1.0);
  eval::GradParity g = eval::compare_gradients(*model, ids, B, T, dir + "/grads.safetensors");
  EXPECT_EQ(g.rel_l2.size(), model->layout().entries().size());
  for (const auto& [name, rel] : g.rel_l2) EXPECT_LE(rel, 1e-4) << name;
  RecordProperty("max_kl", std::to_string(p.max_kl));
  RecordProperty("max_grad_rel_l2", std::to_string(g.max_rel_l2));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaHfParity, ::testing::Values("gqa", "window", "deep"),
                         testing::ParamName());

TEST(CudaModel, DocumentMaskMatchesAnExplicitMask) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture("model/document_mask");
  const auto docs = nlohmann::json::parse(core::read_file(dir + "/documents.json"));
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  const auto starts =
      model::document_starts(ids.data(), B, T, docs["eos_token_id"].get<std::int64_t>());
  auto model = model::load_model(dir, gpu);
  const std::int64_t V = model->config().embedding_size;
  std::vector<float> logits(static_cast<std::size_t>(B * T * V));
  model->forward_logits(ids.data(), B, T, logits.data(), starts.data());
  eval::LogitParity p =
      eval::compare_logits(logits, V, io::read_npy(dir + "/logits.npy").as_f32(), V);
  EXPECT_LE(p.max_kl, 1e-6);
  EXPECT_EQ(p.top1_agreement, 1.0);
  eval::GradParity g =
      eval::compare_gradients(*model, ids, B, T, dir + "/grads.safetensors", starts.data());
  for (const auto& [name, rel] : g.rel_l2) EXPECT_LE(rel, 1e-4) << name;
}

// The same weights and batch on both backends, with z-loss, ignored labels and documents.
TEST(CudaModel, LossAndGradientsMatchTheCpuBackend) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture("model/deep");
  auto on_cpu = model::load_model(dir, testing::cpu_backend());
  auto on_gpu = model::load_model(dir, gpu);
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
    EXPECT_NEAR(b.ce_sum, a.ce_sum, 1e-5 * a.ce_sum);
    EXPECT_NEAR(b.z_sum, a.z_sum, 1e-5 * a.z_sum);
    const std::vector<float> ga = on_cpu->grads_to_host(), gb = on_gpu->grads_to_host();
    for (const model::ParameterEntry& e : on_cpu->layout().entries()) {
      const std::vector<float> x(ga.begin() + e.offset, ga.begin() + e.offset + e.numel);
      const std::vector<float> y(gb.begin() + e.offset, gb.begin() + e.offset + e.numel);
      EXPECT_LE(cuda_testing::rel_l2(y, x), 1e-4) << e.name << (docs ? " (documents)" : "");
    }
  }
}

TEST(CudaModel, ScoresMatchTheCpuBackend) {
  REQUIRE_CUDA(gpu);
  const std::string dir = testing::fixture("model/gqa");
  auto on_cpu = model::load_model(dir, testing::cpu_backend());
  auto on_gpu = model::load_model(dir, gpu);
  io::NpyArray ids_arr = io::read_npy(dir + "/ids.npy");
  const std::vector<std::int64_t> ids = ids_arr.as_i64();
  const std::int64_t B = ids_arr.shape[0], T = ids_arr.shape[1];
  std::vector<std::int64_t> positions, targets;
  for (std::int64_t p = 0; p + 1 < B * T; p += 3)
    positions.push_back(p), targets.push_back(ids[p + 1]);
  const auto a = on_cpu->token_log_probs(ids.data(), B, T, positions, targets);
  const auto b = on_gpu->token_log_probs(ids.data(), B, T, positions, targets);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * (1 + std::fabs(a[i])));
}

// `tandem parity --backend cuda`, which tools/gpu_hf_parity.py runs against HF on the same GPU:
// a fixture's logits and gradients within the bounds above, reported as one JSON object that
// names the backend.
TEST(CudaModel, ParityCommandRunsTheModelOnTheGpu) {
  REQUIRE_GPU();
  const std::string d = testing::fixture("model/deep");
  auto r = testing::run_tandem("parity --backend cuda --json --model " + d + " --tokens " + d +
                               "/ids.npy --reference " + d + "/logits.npy --grads " + d +
                               "/grads.safetensors --max-kl 1e-6 --max-abs-diff-rel 1e-4 "
                               "--max-grad-rel-l2 1e-4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::size_t at = r.output.rfind("\n{");
  const nlohmann::json j =
      nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1));
  EXPECT_TRUE(j["pass"].get<bool>()) << r.output;
  EXPECT_EQ(j["backend"].get<std::string>().rfind("cuda: ", 0), 0u) << j["backend"];
  EXPECT_LE(j["max_grad_rel_l2"].get<double>(), 1e-4);
}

}  // namespace
}  // namespace tandem
