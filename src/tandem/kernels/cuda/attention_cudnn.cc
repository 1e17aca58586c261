// cuDNN fused attention through the cuDNN frontend's graph API, loaded at run time
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, set by cmake/TandemCuda.cmake for this file only).
// One graph per problem shape, built on first use and cached; a shape cuDNN refuses is
// remembered too, so the refusal costs one build attempt.
#include "tandem/kernels/cuda/attention_cudnn.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

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

// (B, T, Hq, Hkv, D, window, scale bits, Hq and Hkv of the rows): a piece of a larger problem
// (attention_cudnn.h) takes B of its batch entries and Hq, Hkv of its heads, in rows of the whole
// problem's heads.
using Key = std::tuple<i64, i64, i64, i64, i64, i64, std::uint32_t, i64, i64>;

Key key_of(i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale, i64 Hq_rows,
           i64 Hkv_rows) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  // A window covering the whole sequence is plain causal attention.
  if (window >= T) window = 0;
  return {B, T, Hq, Hkv, D, window > 0 ? window : 0, bits, Hq_rows, Hkv_rows};
}

// [B, T, H_rows, D] memory (H of its heads) as cuDNN's logical [B, H, T, D].
std::shared_ptr<fe::graph::Tensor_attributes> bthd(fe::graph::Graph& g, const char* name, Uid uid,
                                                   i64 B, i64 T, i64 H, i64 D, i64 H_rows) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, H, T, D})
                      .set_stride({T * H_rows * D, D, H_rows * D, 1}));
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
  std::int64_t min_pieces = 1;  // TANDEM_CUDA_CUDNN_BACKWARD_PIECES
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;  // null: refused
    std::string refusal;
    std::int64_t workspace = 0;
  };
  std::map<Key, Entry> forward, backward;
  // How many pieces each backward problem last ran in (absent: the whole, or not run yet;
  // kNoPieceFit: not even its smallest piece had room with the allocator's cache given back).
  std::map<Key, std::int64_t> pieces_ran;
  static constexpr std::int64_t kNoPieceFit = std::numeric_limits<std::int64_t>::max();

  // A graph of `key`'s q, k, v that `describe` completes, built into plans. What the frontend
  // throws (no implementation fits the graph, a symbol libcudnn lacks) is a refusal like a bad
  // status.
  template <typename Describe>
  Entry build(const Key& key, Describe describe) {
    const auto [B, T, Hq, Hkv, D, window, scale_bits, Hq_rows, Hkv_rows] = key;
    Entry e;
    try {
      auto g = std::make_shared<fe::graph::Graph>();
      g->set_io_data_type(fe::DataType_t::BFLOAT16)
          .set_intermediate_data_type(fe::DataType_t::FLOAT)
          .set_compute_data_type(fe::DataType_t::FLOAT);
      describe(*g, bthd(*g, "Q", kQ, B, T, Hq, D, Hq_rows),
               bthd(*g, "K", kK, B, T, Hkv, D, Hkv_rows),
               bthd(*g, "V", kV, B, T, Hkv, D, Hkv_rows));
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
    const auto [B, T, Hq, Hkv, D, window, scale_bits, Hq_rows, Hkv_rows] = key;
    Entry e = build(key, [&](fe::graph::Graph& g, auto q, auto k, auto v) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("tandem_attention")
                         .set_generate_stats(true)
                         .set_attn_scale(scale_of(scale_bits))
                         .set_causal_mask(true);
      if (window > 0) options.set_sliding_window_length(static_cast<int>(window));
      auto [o, stats] = g.sdpa(q, k, v, options);
      o->set_output(true)
          .set_uid(kO)
          .set_dim({B, Hq, T, D})
          .set_stride({T * Hq_rows * D, D, Hq_rows * D, 1});
      stats->set_output(true)
          .set_uid(kStats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim({B, Hq, T, 1})
          .set_stride({Hq_rows * T, T, 1, 1});
    });
    return forward.emplace(key, std::move(e)).first->second;
  }

  const Entry& build_backward(const Key& key) {
    auto found = backward.find(key);
    if (found != backward.end()) return found->second;
    const auto [B, T, Hq, Hkv, D, window, scale_bits, Hq_rows, Hkv_rows] = key;
    Entry e = build(key, [&](fe::graph::Graph& g, auto q, auto k, auto v) {
      auto o = bthd(g, "O", kO, B, T, Hq, D, Hq_rows);
      auto d_o = bthd(g, "dO", kDO, B, T, Hq, D, Hq_rows);
      auto stats = g.tensor(fe::graph::Tensor_attributes()
                                .set_name("Stats")
                                .set_uid(kStats)
                                .set_dim({B, Hq, T, 1})
                                .set_stride({Hq_rows * T, T, 1, 1})
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
          .set_stride({T * Hq_rows * D, D, Hq_rows * D, 1});
      dk->set_output(true)
          .set_uid(kDK)
          .set_dim({B, Hkv, T, D})
          .set_stride({T * Hkv_rows * D, D, Hkv_rows * D, 1});
      dv->set_output(true)
          .set_uid(kDV)
          .set_dim({B, Hkv, T, D})
          .set_stride({T * Hkv_rows * D, D, Hkv_rows * D, 1});
    });
    return backward.emplace(key, std::move(e)).first->second;
  }

  // The workspace of `bytes` (null for none), or false where the device has no room for it (the
  // allocator's message in `why`). Without `may_release` the allocator's cache is kept (and `why`
  // left as it was). Any other error propagates.
  bool reserve(std::int64_t bytes, void** workspace, std::string* why, bool may_release = true) {
    *workspace = nullptr;
    if (bytes <= 0) return true;
    if (!may_release) {
      *workspace = memory->try_allocate(static_cast<std::size_t>(bytes));
      return *workspace != nullptr;
    }
    try {
      *workspace = memory->allocate(static_cast<std::size_t>(bytes));
    } catch (const core::OutOfMemory& ex) {
      *why = ex.what();
      return false;
    }
    return true;
  }

  bool execute(const Entry& e, std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack,
               void* workspace, std::string* refusal) {
    auto status = e.graph->execute(handle, pack, workspace);
    if (status.is_bad()) {
      *refusal = status.get_message();
      return false;
    }
    return true;
  }

  bool run(const Entry& e, std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack,
           std::string* refusal) {
    void* workspace = nullptr;
    std::string why;
    if (!reserve(e.workspace, &workspace, &why)) {
      *refusal = fmt::format("no room for cuDNN's {} B workspace: {}", e.workspace, why);
      return false;
    }
    const bool ok = execute(e, pack, workspace, refusal);
    if (workspace) memory->free(workspace);  // stream-ordered: safe to reuse after this call
    return ok;
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
                                                     std::int64_t backward_pieces,
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
  impl->min_pieces = std::max<std::int64_t>(1, backward_pieces);
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

std::int64_t CudnnAttention::pieces_asked() const { return impl_->min_pieces; }

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
  const Impl::Entry& e = impl_->build_forward(key_of(B, T, Hq, Hkv, D, window, scale, Hq, Hkv));
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
  pieces_ = AttentionPiece{B, Hkv};
  const Key key = key_of(B, T, Hq, Hkv, D, window, scale, Hq, Hkv);
  const Impl::Entry& whole = impl_->build_backward(key);
  if (!whole.graph) {
    refusal_ = whole.refusal;
    return false;
  }
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack;
  // The piece of `b0` batch entries on and kv heads from `h0` (with their query heads): each
  // operand at its first element of the piece, in the whole problem's rows.
  const i64 group = Hq / Hkv;
  auto point_at = [&](i64 b0, i64 h0) {
    const auto bf16_at = [](const void* p, i64 element) {
      return const_cast<char*>(static_cast<const char*>(p)) + element * 2;
    };
    const i64 q_at = (b0 * T * Hq + h0 * group) * D, kv_at = (b0 * T * Hkv + h0) * D;
    pack = {{kQ, bf16_at(q, q_at)},
            {kK, bf16_at(k, kv_at)},
            {kV, bf16_at(v, kv_at)},
            {kO, bf16_at(out, q_at)},
            {kStats, const_cast<float*>(lse) + b0 * Hq * T + h0 * group * T},
            {kDO, bf16_at(dout, q_at)},
            {kDQ, bf16_at(dq, q_at)},
            {kDK, bf16_at(dk, kv_at)},
            {kDV, bf16_at(dv, kv_at)}};
  };
  // The deterministic backward's workspace grows with B x H x T^2 (17 GB at B = 4, 32 heads,
  // T = 8192 with cuDNN before 9.25): where the whole has no room, the largest pieces that have
  // run one after another (each computes the gradients of its own heads and entries, from their
  // operands alone), and where none has, tandem's kernels run instead of the step failing.
  // Runs the problem in pieces of `piece`'s shape with `e`'s graph; nullopt where its workspace
  // has no room (with `may_release`, the allocator's message in `why`).
  std::string why;
  auto run_in = [&](const AttentionPiece& piece, const Impl::Entry& e,
                    bool may_release) -> std::optional<bool> {
    void* workspace = nullptr;
    if (!impl_->reserve(e.workspace, &workspace, &why, may_release)) return std::nullopt;
    bool ok = true;
    for (i64 b0 = 0; ok && b0 < B; b0 += piece.batch)
      for (i64 h0 = 0; ok && h0 < Hkv; h0 += piece.kv_heads) {
        point_at(b0, h0);
        ok = impl_->execute(e, pack, workspace, &refusal_);
      }
    if (workspace) impl_->memory->free(workspace);  // stream-ordered: safe to reuse after this call
    pieces_ = piece;
    return ok;
  };
  // The whole problem, or its pieces from the largest down to `most` of them; the pieces each
  // problem last ran in are remembered for the next call's tries with the cache kept.
  auto run_whole = [&](bool may_release) {
    const std::optional<bool> ok = run_in(AttentionPiece{B, Hkv}, whole, may_release);
    if (ok) impl_->pieces_ran.erase(key);
    return ok;
  };
  std::vector<std::pair<AttentionPiece, const Impl::Entry*>> tries;  // listed below
  auto run_pieces = [&](bool may_release, std::int64_t most) -> std::optional<bool> {
    for (const auto& [piece, e] : tries) {
      if (piece.count(B, Hkv) > most) break;
      if (const std::optional<bool> ok = run_in(piece, *e, may_release)) {
        impl_->pieces_ran[key] = piece.count(B, Hkv);
        return ok;
      }
    }
    return std::nullopt;
  };
  // Every layer's backward comes here, so each try is first made with what the allocator holds
  // and the driver has free, keeping the allocator's cache: under memory pressure, giving the
  // cache back on every call (a device synchronisation, then cudaMalloc again for every block it
  // held) would cost more than the pieces. Kept so, the whole and the pieces down to as many as
  // this problem last ran in (the first time: the whole only); only where none of those fits is
  // the cache given back and every one tried once more, from the whole down. So the pieces are
  // those that fit with the cache given back, as `tandem plan` counts them, later calls take
  // their workspace from the cache, and a problem for which not even that left room goes on to
  // tandem's kernels without giving the cache back again. The whole first, without listing
  // pieces, unless pieces are asked for.
  const bool whole_allowed = impl_->min_pieces <= 1;
  if (whole_allowed)
    if (const std::optional<bool> ok = run_whole(false)) return *ok;
  const std::vector<AttentionPiece> pieces = cudnn_backward_pieces(B, T, Hq, Hkv);
  // At least min_pieces pieces (or the most there are); more than one where the whole was tried.
  const std::int64_t at_least = std::min(impl_->min_pieces, pieces.back().count(B, Hkv));
  const std::int64_t fewest = whole_allowed ? 2 : at_least;
  std::int64_t smallest = whole.workspace;
  for (const AttentionPiece& piece : pieces) {
    if (piece.count(B, Hkv) < fewest) continue;
    const Impl::Entry& e = impl_->build_backward(
        key_of(piece.batch, T, piece.kv_heads * group, piece.kv_heads, D, window, scale, Hq, Hkv));
    if (!e.graph) continue;
    smallest = std::min(smallest, e.workspace);
    tries.emplace_back(piece, &e);
  }
  const auto last = impl_->pieces_ran.find(key);
  const std::int64_t most_kept = last == impl_->pieces_ran.end() ? 0 : last->second;
  if (const std::optional<bool> ok = run_pieces(false, most_kept)) return *ok;
  if (most_kept == Impl::kNoPieceFit) {
    why = "none had room when the allocator's cache was given back for this problem";
  } else {
    if (whole_allowed)
      if (const std::optional<bool> ok = run_whole(true)) return *ok;
    if (const std::optional<bool> ok = run_pieces(true, Impl::kNoPieceFit)) return *ok;
    impl_->pieces_ran[key] = Impl::kNoPieceFit;
  }
  refusal_ = at_least > 1
                 ? fmt::format(
                       "no room for cuDNN's workspace in {} pieces or more "
                       "(TANDEM_CUDA_CUDNN_BACKWARD_PIECES), the smallest piece's {} B: {}",
                       at_least, smallest, why)
                 : fmt::format(
                       "no room for cuDNN's {} B workspace, nor for its smallest piece's "
                       "({} B): {}",
                       whole.workspace, smallest, why);
  return false;
}

}  // namespace tandem::kernels::cuda
