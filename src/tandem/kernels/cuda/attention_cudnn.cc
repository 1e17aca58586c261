// cuDNN fused attention through the cuDNN frontend's graph API, loaded at run time
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, set by cmake/TandemCuda.cmake for this file only).
// One graph per problem shape, built on first use and cached; a shape cuDNN refuses is
// remembered too, so the refusal costs one build attempt.
#include "tandem/kernels/cuda/attention_cudnn.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "tandem/core/error.h"
#include "tandem/kernels/cuda/caching_allocator.h"

namespace cudnn_frontend {
// The frontend's dynamic loading reads its libcudnn handle from here.
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace tandem::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;
using i64 = std::int64_t;

enum Uid : fe::graph::Tensor_attributes::uid_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// (B, T, Hq, Hkv, D, window, scale bits)
using Key = std::tuple<i64, i64, i64, i64, i64, i64, std::uint32_t>;

Key key_of(i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  // A window covering the whole sequence is plain causal attention.
  if (window >= T) window = 0;
  return {B, T, Hq, Hkv, D, window > 0 ? window : 0, bits};
}

// [B, T, H, D] memory as cuDNN's logical [B, H, T, D].
std::shared_ptr<fe::graph::Tensor_attributes> bthd(fe::graph::Graph& g, const char* name, Uid uid,
                                                   i64 B, i64 T, i64 H, i64 D) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, H, T, D})
                      .set_stride({T * H * D, D, H * D, 1}));
}

float scale_of(std::uint32_t bits) {
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

}  // namespace

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  CachingAllocator* memory = nullptr;
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;  // null: refused
    std::string refusal;
    std::int64_t workspace = 0;
  };
  std::map<Key, Entry> forward, backward;

  // A graph of `key`'s q, k, v that `describe` completes, built into plans. What the frontend
  // throws (no implementation fits the graph, a symbol libcudnn lacks) is a refusal like a bad
  // status.
  template <typename Describe>
  Entry build(const Key& key, Describe describe) {
    const auto [B, T, Hq, Hkv, D, window, scale_bits] = key;
    Entry e;
    try {
      auto g = std::make_shared<fe::graph::Graph>();
      g->set_io_data_type(fe::DataType_t::BFLOAT16)
          .set_intermediate_data_type(fe::DataType_t::FLOAT)
          .set_compute_data_type(fe::DataType_t::FLOAT);
      describe(*g, bthd(*g, "Q", kQ, B, T, Hq, D), bthd(*g, "K", kK, B, T, Hkv, D),
               bthd(*g, "V", kV, B, T, Hkv, D));
      auto status = g->build(handle, {fe::HeurMode_t::A});
      std::int64_t ws = 0;
      if (status.is_good()) status = g->get_workspace_size(ws);
      if (status.is_bad()) {
        e.refusal = status.get_message();
      } else {
        e.workspace = ws;
        e.graph = g;
      }
    } catch (const std::exception& ex) {
      e.refusal = ex.what();
    }
    return e;
  }

  const Entry& build_forward(const Key& key) {
    auto found = forward.find(key);
    if (found != forward.end()) return found->second;
    const auto [B, T, Hq, Hkv, D, window, scale_bits] = key;
    Entry e = build(key, [&](fe::graph::Graph& g, auto q, auto k, auto v) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("tandem_attention")
                         .set_generate_stats(true)
                         .set_attn_scale(scale_of(scale_bits))
                         .set_causal_mask(true);
      if (window > 0) options.set_sliding_window_length(static_cast<int>(window));
      auto [o, stats] = g.sdpa(q, k, v, options);
      o->set_output(true).set_uid(kO).set_dim({B, Hq, T, D}).set_stride({T * Hq * D, D, Hq * D, 1});
      stats->set_output(true)
          .set_uid(kStats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim({B, Hq, T, 1})
          .set_stride({Hq * T, T, 1, 1});
    });
    return forward.emplace(key, std::move(e)).first->second;
  }

  const Entry& build_backward(const Key& key) {
    auto found = backward.find(key);
    if (found != backward.end()) return found->second;
    const auto [B, T, Hq, Hkv, D, window, scale_bits] = key;
    Entry e = build(key, [&](fe::graph::Graph& g, auto q, auto k, auto v) {
      auto o = bthd(g, "O", kO, B, T, Hq, D);
      auto d_o = bthd(g, "dO", kDO, B, T, Hq, D);
      auto stats = g.tensor(fe::graph::Tensor_attributes()
                                .set_name("Stats")
                                .set_uid(kStats)
                                .set_dim({B, Hq, T, 1})
                                .set_stride({Hq * T, T, 1, 1})
                                .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("tandem_attention_backward")
                         .set_attn_scale(scale_of(scale_bits))
                         .set_causal_mask(true)
                         .set_deterministic_algorithm(true);
      if (window > 0) options.set_sliding_window_length(static_cast<int>(window));
      auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
      dq->set_output(true)
          .set_uid(kDQ)
          .set_dim({B, Hq, T, D})
          .set_stride({T * Hq * D, D, Hq * D, 1});
      dk->set_output(true)
          .set_uid(kDK)
          .set_dim({B, Hkv, T, D})
          .set_stride({T * Hkv * D, D, Hkv * D, 1});
      dv->set_output(true)
          .set_uid(kDV)
          .set_dim({B, Hkv, T, D})
          .set_stride({T * Hkv * D, D, Hkv * D, 1});
    });
    return backward.emplace(key, std::move(e)).first->second;
  }

  bool run(const Entry& e, std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack,
           std::string* refusal) {
    // The deterministic backward's workspace grows with B x H x T^2 (17 GB at B = 4, 32 heads,
    // T = 8192 with cuDNN before 9.25): when it does not fit, the plain kernels run instead of the
    // step failing.
    void* workspace = nullptr;
    if (e.workspace > 0) {
      try {
        workspace = memory->allocate(static_cast<std::size_t>(e.workspace));
      } catch (const core::OutOfMemory& ex) {
        *refusal = fmt::format("no room for cuDNN's {} B workspace: {}", e.workspace, ex.what());
        return false;
      }
    }
    auto status = e.graph->execute(handle, pack, workspace);
    if (workspace) memory->free(workspace);  // stream-ordered: safe to reuse after this call
    if (status.is_bad()) {
      *refusal = status.get_message();
      return false;
    }
    return true;
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudnnAttention::~CudnnAttention() {
  if (impl_ && impl_->handle) {
    impl_->forward.clear();
    impl_->backward.clear();
    fe::detail::destroy_handle(impl_->handle);
  }
}

std::unique_ptr<CudnnAttention> CudnnAttention::open(cudaStream_t stream, CachingAllocator& memory,
                                                     std::string* why) {
#ifndef TANDEM_EMULATED_CUDNN  // the CUDA emulator's frontend runs on the CPU: nothing to load
  if (fe::cudnn_dlhandle == nullptr) {
    fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (fe::cudnn_dlhandle == nullptr) {
      const char* error = dlerror();
      *why = fmt::format("cannot open libcudnn.so.9: {}", error ? error : "unknown error");
      return nullptr;
    }
  }
#endif
  // The frontend looks the CUDA runtime up by name; ours is CUDA 13's.
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  impl->memory = &memory;
  try {
    const std::size_t version = fe::detail::get_backend_version();
    if (version < 90200) {
      *why = fmt::format("cuDNN {} is older than 9.2, the first with sliding-window SDPA", version);
      return nullptr;
    }
    if (fe::detail::create_handle(&impl->handle) != CUDNN_STATUS_SUCCESS) {
      *why = "cudnnCreate failed";
      return nullptr;
    }
    fe::detail::set_stream(impl->handle, stream);
  } catch (const std::exception& ex) {
    *why = ex.what();
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

std::string CudnnAttention::version() const {
  const std::size_t v = fe::detail::get_backend_version();
#ifdef TANDEM_EMULATED_CUDNN
  return fmt::format("{}.{}.{} (the CUDA emulator's)", v / 10000, v / 100 % 100, v % 100);
#else
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
#endif
}

bool CudnnAttention::forward(const void* q, const void* k, const void* v, void* out, float* lse,
                             i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale) {
  const Impl::Entry& e = impl_->build_forward(key_of(B, T, Hq, Hkv, D, window, scale));
  if (!e.graph) {
    refusal_ = e.refusal;
    return false;
  }
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                                                         {kK, const_cast<void*>(k)},
                                                                         {kV, const_cast<void*>(v)},
                                                                         {kO, out},
                                                                         {kStats, lse}};
  return impl_->run(e, pack, &refusal_);
}

bool CudnnAttention::backward(const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale) {
  const Impl::Entry& e = impl_->build_backward(key_of(B, T, Hq, Hkv, D, window, scale));
  if (!e.graph) {
    refusal_ = e.refusal;
    return false;
  }
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kQ, const_cast<void*>(q)},
      {kK, const_cast<void*>(k)},
      {kV, const_cast<void*>(v)},
      {kO, const_cast<void*>(out)},
      {kStats, const_cast<float*>(lse)},
      {kDO, const_cast<void*>(dout)},
      {kDQ, dq},
      {kDK, dk},
      {kDV, dv}};
  return impl_->run(e, pack, &refusal_);
}

}  // namespace tandem::kernels::cuda
