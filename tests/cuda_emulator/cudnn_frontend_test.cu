// The CUDA emulator's cuDNN frontend (tests/cuda_emulator/cudnn_frontend.cc): a graph is refused
// where cuDNN 9 on Hopper refuses it, execute() refuses memory that does not match the graph, and
// the product follows the graph's dims and strides: a causal, windowed GQA forward on [B, T, H, D]
// memory described as [B, H, T, D] against a direct computation here. (tandem's use of it, against
// the CPU backend, is tests/cuda/bf16_attention_test.cc.) Translated like the backend's .cu files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn_frontend.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulator_test_util.h"

namespace {

namespace fe = cudnn_frontend;
using cuda_emulator_test::device;
using cuda_emulator_test::host;
using cuda_emulator_test::normal;
using i64 = std::int64_t;

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() {
    EXPECT_EQ(fe::detail::create_handle(&h), CUDNN_STATUS_SUCCESS);
    fe::detail::set_stream(h, nullptr);
  }
  ~Handle() { fe::detail::destroy_handle(h); }
};

// A forward graph over [B, T, H, D] memory (tandem's layout) with the given head_dim and window.
std::shared_ptr<fe::graph::Graph> forward_graph(i64 B, i64 T, i64 H, i64 Hk, i64 D, int window) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto bthd = [&](const char* name, i64 uid, i64 heads) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({B, heads, T, D})
                         .set_stride({T * heads * D, D, heads * D, 1}));
  };
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_attn_scale(0.5f)
                     .set_causal_mask(true);
  if (window > 0) options.set_sliding_window_length(window);
  auto [o, stats] = g->sdpa(bthd("Q", 1, H), bthd("K", 2, Hk), bthd("V", 3, Hk), options);
  o->set_output(true).set_uid(4).set_dim({B, H, T, D}).set_stride({T * H * D, D, H * D, 1});
  stats->set_output(true)
      .set_uid(5)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({B, H, T, 1})
      .set_stride({H * T, T, 1, 1});
  return g;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

TEST(CudaEmulatorCudnn, RefusesWhatCudnnRefusesOnHopper) {
  Handle handle;
  for (i64 D : {12, 100, 264}) {  // not a multiple of 8, or above 256
    const fe::error_t e = forward_graph(1, 16, 2, 1, D, 0)->build(handle.h, {fe::HeurMode_t::A});
    EXPECT_TRUE(e.is_bad()) << D;
    EXPECT_NE(e.get_message().find("multiple of 8"), std::string::npos) << e.get_message();
  }
  EXPECT_TRUE(forward_graph(1, 16, 2, 1, 256, 0)->build(handle.h, {fe::HeurMode_t::A}).is_good());
  EXPECT_TRUE(forward_graph(1, 16, 3, 2, 16, 0)->build(handle.h, {fe::HeurMode_t::A}).is_bad())
      << "3 query heads over 2 kv heads";
  auto g = std::make_shared<fe::graph::Graph>();  // fp32 io: not what is emulated
  g->set_io_data_type(fe::DataType_t::FLOAT)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  EXPECT_TRUE(g->build(handle.h, {fe::HeurMode_t::A}).is_bad());
}

TEST(CudaEmulatorCudnn, ExecuteChecksTheVariantPackAgainstTheGraph) {
  Handle handle;
  const i64 B = 1, T = 8, H = 2, D = 16;
  auto g = forward_graph(B, T, H, H, D, 0);
  ASSERT_TRUE(g->build(handle.h, {fe::HeurMode_t::A}).is_good());
  std::int64_t ws = -1;
  ASSERT_TRUE(g->get_workspace_size(ws).is_good());
  EXPECT_EQ(ws, 0);
  auto* x = device(to_bf16(std::vector<float>(B * T * H * D, 0.5f)));
  auto* y = device(to_bf16(std::vector<float>(B * T * H * D, 0.0f)));
  auto* short_y = device(to_bf16(std::vector<float>(B * T * H * D - 1, 0.0f)));
  float* stats = device(std::vector<float>(B * H * T, 0.0f));
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {1, x}, {2, x}, {3, x}, {4, y}, {5, stats}};
  EXPECT_TRUE(g->execute(handle.h, pack, nullptr).is_good());
  pack.erase(5);
  EXPECT_TRUE(g->execute(handle.h, pack, nullptr).is_bad()) << "Stats missing";
  pack[5] = stats;
  pack[4] = short_y;  // one element short of what O's strides reach
  const fe::error_t e = g->execute(handle.h, pack, nullptr);
  EXPECT_TRUE(e.is_bad());
  EXPECT_NE(e.get_message().find("not inside one device allocation"), std::string::npos);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(x);
  cudaFree(y);
  cudaFree(short_y);
  cudaFree(stats);
}

// Keys j with i - window < j <= i, query head h reading kv head h / (H / Hk), rows at [b, t, h, :]:
// the output and the natural-log logsumexp against a direct computation in double (the emulator
// rounds the probabilities to bf16 before P V, as cuDNN does: within a few bf16 steps of it).
TEST(CudaEmulatorCudnn, ForwardFollowsTheGraphsLayoutMaskAndGroups) {
  Handle handle;
  const i64 B = 2, T = 21, H = 4, Hk = 2, D = 8;
  const int window = 5;
  const std::vector<float> q = normal(B * T * H * D, 1), k = normal(B * T * Hk * D, 2),
                           v = normal(B * T * Hk * D, 3);
  auto* dq = device(to_bf16(q));
  auto* dk = device(to_bf16(k));
  auto* dv = device(to_bf16(v));
  auto* dout = device(to_bf16(std::vector<float>(B * T * H * D, 0.0f)));
  float* dstats = device(std::vector<float>(B * H * T, 0.0f));
  auto g = forward_graph(B, T, H, Hk, D, window);
  ASSERT_TRUE(g->build(handle.h, {fe::HeurMode_t::A}).is_good());
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {1, dq}, {2, dk}, {3, dv}, {4, dout}, {5, dstats}};
  ASSERT_TRUE(g->execute(handle.h, pack, nullptr).is_good());
  const std::vector<__nv_bfloat16> out = host(dout, B * T * H * D);
  const std::vector<float> stats = host(dstats, B * H * T);
  auto r = [](float x) { return __bfloat162float(__float2bfloat16_rn(x)); };
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h)
      for (i64 i = 0; i < T; ++i) {
        std::vector<double> s;
        double m = -INFINITY;
        for (i64 j = i - window + 1; j <= i; ++j) {
          double dot = 0.0;
          for (i64 d = 0; d < D; ++d)
            dot += static_cast<double>(r(q[((b * T + i) * H + h) * D + d])) *
                   r(k[((b * T + (j < 0 ? 0 : j)) * Hk + h / 2) * D + d]);
          s.push_back(j < 0 ? -INFINITY : 0.5 * dot);
          m = std::max(m, s.back());
        }
        double l = 0.0;
        for (double x : s) l += std::exp(x - m);
        EXPECT_NEAR(stats[(b * H + h) * T + i], m + std::log(l), 1e-5) << b << " " << h << " " << i;
        for (i64 d = 0; d < D; ++d) {
          double o = 0.0;
          for (i64 j = i - window + 1, n = 0; j <= i; ++j, ++n)
            if (j >= 0) o += std::exp(s[n] - m) / l * r(v[((b * T + j) * Hk + h / 2) * D + d]);
          EXPECT_NEAR(__bfloat162float(out[((b * T + i) * H + h) * D + d]), o,
                      4 * 0.0078125 * (std::fabs(o) + 0.1))
              << b << " " << h << " " << i << " " << d;
        }
      }
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dout);
  cudaFree(dstats);
}

}  // namespace
