// The CUDA emulator's cuDNN frontend (include/cudnn_frontend.h): one fused SDPA forward or
// backward per graph, checked at build() as cuDNN 9 checks it on Hopper and at execute() against
// the memory it is given, computed on the CPU when its stream runs.
#include <cuda_bf16.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "emulator_state.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace cudnn_frontend {

namespace detail {
std::size_t get_backend_version() { return 91300; }
cudnnStatus_t create_handle(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t destroy_handle(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t set_stream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace detail

namespace graph {
namespace {

using i64 = std::int64_t;

error_t refuse(error_code_t code, const std::string& why) {
  return {code, "cuDNN (emulated): " + why};
}

// A tensor's [batch, heads, sequence, head_dim] geometry and where its elements are.
struct View {
  i64 dim[4], stride[4];
  DataType_t type;
  std::string name;
  // Elements from the first to one past the last that the strides reach.
  i64 extent() const {
    i64 last = 0;
    for (int a = 0; a < 4; ++a) last += (dim[a] - 1) * stride[a];
    return last + 1;
  }
  i64 at(i64 b, i64 h, i64 t, i64 d) const {
    return b * stride[0] + h * stride[1] + t * stride[2] + d * stride[3];
  }
};

std::string dims_str(const std::vector<i64>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// The tensor's view, or the reason it has none (every tensor is described in full here: where
// cuDNN would infer an output's strides, the emulator asks for them, since how tandem lays out its
// memory is what it checks).
error_t view_of(const Tensor_attributes& t, DataType_t io, View* v) {
  if (!t.get_uid()) return refuse(error_code_t::ATTRIBUTE_NOT_SET, t.get_name() + ": no uid");
  if (t.get_dim().size() != 4 || t.get_stride().size() != 4)
    return refuse(error_code_t::ATTRIBUTE_NOT_SET,
                  t.get_name() + ": dims " + dims_str(t.get_dim()) + " and strides " +
                      dims_str(t.get_stride()) + " must both be 4-D");
  for (int a = 0; a < 4; ++a) {
    v->dim[a] = t.get_dim()[static_cast<std::size_t>(a)];
    v->stride[a] = t.get_stride()[static_cast<std::size_t>(a)];
    if (v->dim[a] <= 0 || v->stride[a] <= 0)
      return refuse(error_code_t::INVALID_VALUE,
                    t.get_name() + ": dims and strides must be positive");
  }
  v->type = t.get_data_type() == DataType_t::NOT_SET ? io : t.get_data_type();
  v->name = t.get_name();
  return {};
}

bool same_dims(const View& a, const View& b) { return std::equal(a.dim, a.dim + 4, b.dim); }

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The problem a built graph computes.
struct Problem {
  bool backward;
  float scale;
  std::optional<int> window;
  // Forward: q k v o stats; backward: q k v o dO stats dQ dK dV.
  std::vector<View> views;
  std::vector<Tensor_attributes::uid_t> uids;
};

float load(const void* p, const View& v, i64 i) {
  return v.type == DataType_t::FLOAT ? static_cast<const float*>(p)[i]
                                     : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void store(void* p, const View& v, i64 i, float x) {
  if (v.type == DataType_t::FLOAT)
    static_cast<float*>(p)[i] = x;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
}

// Top-left causal mask, the window as the frontend's left bound: key j is kept for query i when
// j <= i and j > i - window.
bool kept(i64 i, i64 j, const std::optional<int>& window) {
  return j <= i && (!window || j > i - *window);
}

// The scaled scores of query row i of head h against every key, fp32 from double sums.
void scores(const Problem& p, void* const* ptr, i64 b, i64 h, i64 kh, i64 i,
            std::vector<float>& s) {
  const View &q = p.views[0], &k = p.views[1];
  const i64 D = q.dim[3];
  for (i64 j = 0; j < k.dim[2]; ++j) {
    double acc = 0.0;
    for (i64 d = 0; d < D; ++d)
      acc += static_cast<double>(load(ptr[0], q, q.at(b, h, i, d))) *
             load(ptr[1], k, k.at(b, kh, j, d));
    s[static_cast<std::size_t>(j)] = static_cast<float>(acc) * p.scale;
  }
}

void forward(const Problem& p, void* const* ptr) {
  const View &q = p.views[0], &k = p.views[1], &v = p.views[2], &o = p.views[3],
             &stats = p.views[4];
  const i64 B = q.dim[0], H = q.dim[1], T = q.dim[2], D = q.dim[3], S = k.dim[2];
  const i64 group = H / k.dim[1];
#pragma omp parallel for collapse(2) schedule(static)
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h) {
      std::vector<float> s(static_cast<std::size_t>(S));
      std::vector<double> acc(static_cast<std::size_t>(D));
      for (i64 i = 0; i < T; ++i) {
        scores(p, ptr, b, h, h / group, i, s);
        // Flash-attention's order: exp(s - max) rounded to bf16 for P V, divided by the fp32 sum
        // of the unrounded terms at the end.
        float m = -INFINITY;
        for (i64 j = 0; j < S; ++j)
          if (kept(i, j, p.window)) m = std::max(m, s[static_cast<std::size_t>(j)]);
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (i64 j = 0; j < S; ++j) {
          if (!kept(i, j, p.window)) continue;
          const float e = std::exp(s[static_cast<std::size_t>(j)] - m);
          sum += e;
          const float e16 = bf16_round(e);
          for (i64 d = 0; d < D; ++d)
            acc[static_cast<std::size_t>(d)] +=
                static_cast<double>(e16) * load(ptr[2], v, v.at(b, h / group, j, d));
        }
        const float l = static_cast<float>(sum), lse = m + std::log(l);
        for (i64 d = 0; d < D; ++d)
          store(ptr[3], o, o.at(b, h, i, d),
                static_cast<float>(acc[static_cast<std::size_t>(d)]) / l);
        store(ptr[4], stats, stats.at(b, h, i, 0), lse);
      }
    }
}

void backward(const Problem& p, void* const* ptr) {
  const View &q = p.views[0], &k = p.views[1], &v = p.views[2], &o = p.views[3], &d_o = p.views[4],
             &stats = p.views[5], &dq = p.views[6], &dk = p.views[7], &dv = p.views[8];
  const i64 B = q.dim[0], H = q.dim[1], T = q.dim[2], D = q.dim[3], Hk = k.dim[1], S = k.dim[2];
  const i64 group = H / Hk;
  // Per (batch, kv head): the group's query heads in order, so that dK and dV have one writer.
#pragma omp parallel for collapse(2) schedule(static)
  for (i64 b = 0; b < B; ++b)
    for (i64 kh = 0; kh < Hk; ++kh) {
      std::vector<double> gk(static_cast<std::size_t>(S * D), 0.0),
          gv(static_cast<std::size_t>(S * D), 0.0), gq(static_cast<std::size_t>(D));
      std::vector<float> s(static_cast<std::size_t>(S));
      for (i64 h = kh * group; h < (kh + 1) * group; ++h)
        for (i64 i = 0; i < T; ++i) {
          scores(p, ptr, b, h, kh, i, s);
          const float lse = load(ptr[5], stats, stats.at(b, h, i, 0));
          double delta = 0.0;
          for (i64 d = 0; d < D; ++d)
            delta += static_cast<double>(load(ptr[4], d_o, d_o.at(b, h, i, d))) *
                     load(ptr[3], o, o.at(b, h, i, d));
          std::fill(gq.begin(), gq.end(), 0.0);
          for (i64 j = 0; j < S; ++j) {
            if (!kept(i, j, p.window)) continue;
            const float pij = std::exp(s[static_cast<std::size_t>(j)] - lse);
            double dp = 0.0;
            for (i64 d = 0; d < D; ++d)
              dp += static_cast<double>(load(ptr[4], d_o, d_o.at(b, h, i, d))) *
                    load(ptr[2], v, v.at(b, kh, j, d));
            const float p16 = bf16_round(pij);
            const float ds16 = bf16_round(pij * static_cast<float>(dp - delta));
            for (i64 d = 0; d < D; ++d) {
              const std::size_t jd = static_cast<std::size_t>(j * D + d);
              gq[static_cast<std::size_t>(d)] +=
                  static_cast<double>(ds16) * load(ptr[1], k, k.at(b, kh, j, d));
              gk[jd] += static_cast<double>(ds16) * load(ptr[0], q, q.at(b, h, i, d));
              gv[jd] += static_cast<double>(p16) * load(ptr[4], d_o, d_o.at(b, h, i, d));
            }
          }
          for (i64 d = 0; d < D; ++d)
            store(ptr[6], dq, dq.at(b, h, i, d),
                  static_cast<float>(p.scale * gq[static_cast<std::size_t>(d)]));
        }
      for (i64 j = 0; j < S; ++j)
        for (i64 d = 0; d < D; ++d) {
          const std::size_t jd = static_cast<std::size_t>(j * D + d);
          store(ptr[7], dk, dk.at(b, kh, j, d), static_cast<float>(p.scale * gk[jd]));
          store(ptr[8], dv, dv.at(b, kh, j, d), static_cast<float>(gv[jd]));
        }
    }
}

}  // namespace

Graph::Tensor Graph::tensor(const Tensor_attributes& attributes) {
  tensors_.push_back(std::make_shared<Tensor_attributes>(attributes));
  return tensors_.back();
}

std::array<Graph::Tensor, 2> Graph::sdpa(Tensor q, Tensor k, Tensor v, SDPA_attributes options) {
  Node n;
  n.forward_options = std::move(options);
  n.inputs = {q, k, v};
  n.outputs = {std::make_shared<Tensor_attributes>(), nullptr};
  n.outputs[0]->set_name(n.forward_options.name + "::O");
  if (n.forward_options.generate_stats) {
    n.outputs[1] = std::make_shared<Tensor_attributes>();
    n.outputs[1]->set_name(n.forward_options.name + "::Stats");
  }
  nodes_.push_back(n);
  return {n.outputs[0], n.outputs[1]};
}

std::array<Graph::Tensor, 3> Graph::sdpa_backward(Tensor q, Tensor k, Tensor v, Tensor o,
                                                  Tensor d_o, Tensor stats,
                                                  SDPA_backward_attributes options) {
  Node n;
  n.backward = true;
  n.backward_options = std::move(options);
  n.inputs = {q, k, v, o, d_o, stats};
  for (const char* name : {"::dQ", "::dK", "::dV"}) {
    n.outputs.push_back(std::make_shared<Tensor_attributes>());
    n.outputs.back()->set_name(n.backward_options.name + name);
  }
  nodes_.push_back(n);
  return {n.outputs[0], n.outputs[1], n.outputs[2]};
}

namespace {

// The problem of a graph's one SDPA node, or why cuDNN would not build it.
error_t describe(const Graph::Node& n, DataType_t io, Problem* p) {
  std::vector<Graph::Tensor> all = n.inputs;
  for (const Graph::Tensor& t : n.outputs) {
    if (!t) return refuse(error_code_t::ATTRIBUTE_NOT_SET, "Stats must be generated for training");
    if (!t->get_is_output())
      return refuse(error_code_t::ATTRIBUTE_NOT_SET, t->get_name() + " is not marked as output");
    all.push_back(t);
  }
  for (const Graph::Tensor& t : all) {
    if (!t) return refuse(error_code_t::ATTRIBUTE_NOT_SET, "a null tensor");
    View v;
    if (error_t e = view_of(*t, io, &v); e.is_bad()) return e;
    p->views.push_back(v);
    p->uids.push_back(*t->get_uid());
  }
  for (std::size_t a = 0; a < p->uids.size(); ++a)
    for (std::size_t b = a + 1; b < p->uids.size(); ++b)
      if (p->uids[a] == p->uids[b])
        return refuse(error_code_t::INVALID_VALUE,
                      "two tensors share uid " + std::to_string(p->uids[a]));
  p->backward = n.backward;
  const bool causal = n.backward ? n.backward_options.causal : n.forward_options.causal;
  p->window = n.backward ? n.backward_options.left_bound : n.forward_options.left_bound;
  const auto scale = n.backward ? n.backward_options.attn_scale : n.forward_options.attn_scale;
  p->scale = scale.value_or(1.0f);

  const View &q = p->views[0], &k = p->views[1], &v = p->views[2];
  const i64 d = q.dim[3];
  if (!causal)
    return refuse(error_code_t::GRAPH_NOT_SUPPORTED,
                  "the emulator implements the causal mask only (tandem sets it)");
  if (p->window && *p->window <= 0)
    return refuse(error_code_t::INVALID_VALUE,
                  "Left bound (Sliding window length) should be greater than zero when set");
  if (k.dim[0] != q.dim[0] || !same_dims(k, v) || k.dim[3] != d || q.dim[1] % k.dim[1] != 0)
    return refuse(error_code_t::INVALID_VALUE,
                  "Q " + dims_str({q.dim[0], q.dim[1], q.dim[2], q.dim[3]}) + ", K " +
                      dims_str({k.dim[0], k.dim[1], k.dim[2], k.dim[3]}) + " and V do not chain");
  if (q.dim[2] > k.dim[2])
    return refuse(error_code_t::GRAPH_NOT_SUPPORTED, "s_q larger than s_kv (emulator)");
  if (d > 256 || d % 8 != 0)
    return refuse(error_code_t::GRAPH_NOT_SUPPORTED,
                  "Num hidden_dim should be less than or equal to 256 and hidden_dim should be "
                  "multiple of 8");
  // Every bf16 operand contiguous along head_dim, as the fused kernels need.
  for (const View& t : p->views) {
    if (t.type != DataType_t::FLOAT && t.type != DataType_t::BFLOAT16)
      return refuse(error_code_t::GRAPH_NOT_SUPPORTED, t.name + ": a type other than bf16 or fp32");
    if (t.type == DataType_t::BFLOAT16 && t.stride[3] != 1)
      return refuse(error_code_t::GRAPH_NOT_SUPPORTED, t.name + ": head_dim stride must be 1");
  }
  // The operands each role needs: row-shaped like Q or like K, Stats fp32 [b, h, s_q, 1].
  const auto expect = [&](std::size_t i, const View& like, bool stats) -> error_t {
    const View& t = p->views[i];
    const bool ok = stats ? (t.dim[0] == q.dim[0] && t.dim[1] == q.dim[1] && t.dim[2] == q.dim[2] &&
                             t.dim[3] == 1 && t.type == DataType_t::FLOAT)
                          : same_dims(t, like) && t.type == DataType_t::BFLOAT16;
    if (ok) return {};
    return refuse(error_code_t::INVALID_VALUE,
                  t.name + ": dims " + dims_str({t.dim[0], t.dim[1], t.dim[2], t.dim[3]}) +
                      " or type do not fit its role");
  };
  for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{2}})
    if (error_t e = expect(i, i == 0 ? q : k, false); e.is_bad()) return e;
  const std::vector<std::pair<std::size_t, int>> roles =
      n.backward
          ? std::vector<std::pair<std::size_t, int>>{{3, 0}, {4, 0}, {5, 2}, {6, 0}, {7, 1}, {8, 1}}
          : std::vector<std::pair<std::size_t, int>>{{3, 0}, {4, 2}};
  for (const auto& [i, role] : roles)
    if (error_t e = expect(i, role == 1 ? k : q, role == 2); e.is_bad()) return e;
  return {};
}

}  // namespace

error_t Graph::build(cudnnHandle_t handle, const std::vector<HeurMode_t>& modes) {
  if (!handle) return refuse(error_code_t::INVALID_VALUE, "no handle");
  if (modes.empty()) return refuse(error_code_t::INVALID_VALUE, "no heuristic mode");
  if (nodes_.size() != 1)
    return refuse(error_code_t::GRAPH_NOT_SUPPORTED, "the emulator builds graphs of one SDPA node");
  if (io_ != DataType_t::BFLOAT16 || intermediate_ != DataType_t::FLOAT ||
      compute_ != DataType_t::FLOAT)
    return refuse(error_code_t::GRAPH_NOT_SUPPORTED,
                  "io bf16, intermediate and compute fp32 are the types emulated");
  Problem p;
  if (error_t e = describe(nodes_[0], io_, &p); e.is_bad()) return e;
  workspace_ = 0;
  if (p.backward) {
    // dQ accumulated in fp32, and the deterministic algorithm's dP workspace (the frontend's
    // formula for Hopper: b h s_q s_kv 2 bytes, sequences rounded up to 64).
    const View &q = p.views[0], &k = p.views[1];
    const i64 round_q = (q.dim[2] + 63) / 64 * 64, round_kv = (k.dim[2] + 63) / 64 * 64;
    workspace_ = q.dim[0] * q.dim[1] * q.dim[2] * q.dim[3] * 4;
    if (nodes_[0].backward_options.deterministic)
      workspace_ += q.dim[0] * q.dim[1] * round_q * round_kv * 2;
  }
  built_ = true;
  return {};
}

error_t Graph::get_workspace_size(std::int64_t& bytes) const {
  if (!built_) return refuse(error_code_t::ATTRIBUTE_NOT_SET, "the graph is not built");
  bytes = workspace_;
  return {};
}

error_t Graph::execute(cudnnHandle_t handle,
                       std::unordered_map<Tensor_attributes::uid_t, void*>& variant_pack,
                       void* workspace) const {
  if (!built_) return refuse(error_code_t::ATTRIBUTE_NOT_SET, "the graph is not built");
  if (!handle) return refuse(error_code_t::INVALID_VALUE, "no handle");
  Problem p;
  if (error_t e = describe(nodes_[0], io_, &p); e.is_bad()) return e;
  std::vector<void*> ptr;
  for (std::size_t i = 0; i < p.views.size(); ++i) {
    const auto found = variant_pack.find(p.uids[i]);
    if (found == variant_pack.end() || found->second == nullptr)
      return refuse(
          error_code_t::INVALID_VARIANT_PACK,
          p.views[i].name + " (uid " + std::to_string(p.uids[i]) + ") is not in the pack");
    const std::size_t bytes = static_cast<std::size_t>(p.views[i].extent()) *
                              (p.views[i].type == DataType_t::FLOAT ? 4 : 2);
    // The frontend declares every tensor to the backend with its default 16-byte alignment, which
    // the backend may then assume of the pointer (the frontend itself checks Q, K, V and O's).
    if (reinterpret_cast<std::uintptr_t>(found->second) % 16 != 0)
      return refuse(error_code_t::INVALID_VARIANT_PACK,
                    p.views[i].name + " (uid " + std::to_string(p.uids[i]) +
                        "): device pointer is not aligned to the tensor's 16-byte alignment");
    if (!cuda_emulator::detail::device_range(found->second, bytes))
      return refuse(error_code_t::INVALID_VARIANT_PACK,
                    p.views[i].name + ": its " + std::to_string(bytes) +
                        " bytes by dims and strides are not inside one device allocation");
    ptr.push_back(found->second);
  }
  if (workspace_ > 0 &&
      !cuda_emulator::detail::device_range(workspace, static_cast<std::size_t>(workspace_)))
    return refuse(error_code_t::INVALID_VARIANT_PACK, "the workspace is not device memory of the " +
                                                          std::to_string(workspace_) +
                                                          " bytes get_workspace_size gave");
  const cudaError_t queued = cuda_emulator::detail::enqueue(handle->stream, [p, ptr] {
    if (p.backward)
      backward(p, ptr.data());
    else
      forward(p, ptr.data());
  });
  if (queued != cudaSuccess)
    return refuse(error_code_t::GRAPH_EXECUTION_FAILED, "the handle's stream does not exist");
  return {};
}

}  // namespace graph
}  // namespace cudnn_frontend
