// The plain attention kernels: causal, sliding window, GQA, optional intra-document masking, fp32
// arithmetic on fp32 or bf16 storage. They are the parity path (and the fallback where cuDNN's
// fused attention does not apply), written for clarity and determinism rather than peak speed:
//
// - forward: a block holds kWarps consecutive query rows of one (batch, head); each warp owns one
//   query row and walks the key tiles its block can see (kTile keys in shared memory, one key per
//   lane) with an online softmax; lse is saved.
// - backward, flash-attention 2 without atomics: delta = rowsum(out * dout); dQ by a pass over
//   query rows exactly like the forward (recomputing P = exp(S - lse)); dK and dV by a pass over
//   key rows, a warp per key, walking the query tiles (of every query head sharing the kv head)
//   that see it. Every output element has exactly one writer and a fixed summation order, so the
//   result is bit-identical from run to run; the price is computing S and P twice in backward.
#include <cmath>
#include <type_traits>

#include "tandem/kernels/cuda/attention_masks.cuh"
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::load;
using detail::store;

constexpr int kWarps = 8;  // query rows (forward, dQ) or key rows (dK/dV) per block
constexpr int kTile = 32;  // keys (forward, dQ) or queries (dK/dV) per shared tile: one per lane
constexpr int kPerLane = static_cast<int>(kMaxHeadDim / 32);
constexpr unsigned kFull = 0xffffffffu;

using Geometry = detail::AttentionGeometry;
using detail::doc_of;
using detail::first_visible_key;
using detail::neg_inf;
using detail::visible;

// Loads rows [r0, r0 + kTile) of head `head` of x[B, T, heads, D] into s[kTile][ld] as floats;
// rows at or past `end` are zero.
template <typename T>
__device__ void load_tile(const T* x, const Geometry& g, i64 b, i64 heads, i64 head, i64 r0,
                          i64 end, float* s, int ld) {
  const int D = static_cast<int>(g.D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    const i64 row = r0 + r;
    s[r * ld + c] = row < end ? load(x, ((b * g.T + row) * heads + head) * g.D + c) : 0.0f;
  }
}

template <typename T>
__device__ void load_row(const T* x, const Geometry& g, i64 b, i64 heads, i64 head, i64 row,
                         float* s) {
  const int lane = threadIdx.x & 31;
  for (int c = lane; c < g.D; c += 32) s[c] = load(x, ((b * g.T + row) * heads + head) * g.D + c);
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int D) {
  float s = 0.0f;
  for (int c = 0; c < D; ++c) s += a[c] * b[c];
  return s;
}

// ---- forward ----

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, Geometry g) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(g.D), ld = D + 1;
  float* ks = smem;             // [kTile][ld]
  float* vs = ks + kTile * ld;  // [kTile][ld]
  float* qs = vs + kTile * ld;  // [kWarps][D]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 i0 = i64{blockIdx.x} * kWarps, h = blockIdx.y, b = blockIdx.z;
  const i64 kvh = h / (g.Hq / g.Hkv);
  const i64 i = i0 + warp;
  const bool active = i < g.T;
  const i64 last = (i0 + kWarps < g.T ? i0 + kWarps : g.T) - 1;
  float* q_row = qs + warp * D;
  if (active) load_row(q, g, b, g.Hq, h, i, q_row);
  const i64 doc_i = active ? doc_of(g, b, i) : 0;
  const i64 j_begin = first_visible_key(g, b, i0);

  float m = neg_inf(), l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
  for (i64 jt = j_begin; jt <= last; jt += kTile) {
    __syncthreads();
    load_tile(k, g, b, g.Hkv, kvh, jt, last + 1, ks, ld);
    load_tile(v, g, b, g.Hkv, kvh, jt, last + 1, vs, ld);
    __syncthreads();
    if (!active) continue;
    const i64 j = jt + lane;
    float s = neg_inf();
    if (j <= last && visible(i, j, g.window, doc_i))
      s = dot_row(q_row, ks + lane * ld, D) * g.scale;
    const float new_m = fmaxf(m, detail::warp_max(s));
    if (new_m == neg_inf()) continue;  // nothing visible to this row yet
    const float p = s == neg_inf() ? 0.0f : expf(s - new_m);
    const float correction = m == neg_inf() ? 0.0f : expf(m - new_m);
    l = l * correction + detail::warp_sum(p);
    m = new_m;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) acc[r] *= correction;
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int c = lane + 32 * r;
        if (c < D) acc[r] += pj * vs[jj * ld + c];
      }
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int c = lane + 32 * r;
    if (c < D) store(out, ((b * g.T + i) * g.Hq + h) * g.D + c, acc[r] * inv);
  }
  if (lane == 0) lse[(b * g.Hq + h) * g.T + i] = m + logf(l);
}

// ---- backward ----

// delta[b, h, i] = sum_c out * dout, one warp per (b, i, h) row.
template <typename T>
__global__ void delta_kernel(const T* out, const T* dout, float* delta, Geometry g) {
  const i64 row = blockIdx.x * i64{kWarps} + (threadIdx.x >> 5);  // (b * T + i) * Hq + h
  const int lane = threadIdx.x & 31;
  if (row >= g.B * g.T * g.Hq) return;
  float s = 0.0f;
  for (int c = lane; c < g.D; c += 32) s += load(out, row * g.D + c) * load(dout, row * g.D + c);
  s = detail::warp_sum(s);
  const i64 h = row % g.Hq, bt = row / g.Hq;
  const i64 b = bt / g.T, i = bt % g.T;
  if (lane == 0) delta[(b * g.Hq + h) * g.T + i] = s;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(const T* q, const T* k, const T* v, const float* lse, const T* dout,
              const float* delta, T* dq, Geometry g) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(g.D), ld = D + 1;
  float* ks = smem;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;   // [kWarps][D]
  float* dos = qs + kWarps * D;  // [kWarps][D]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 i0 = i64{blockIdx.x} * kWarps, h = blockIdx.y, b = blockIdx.z;
  const i64 kvh = h / (g.Hq / g.Hkv);
  const i64 i = i0 + warp;
  const bool active = i < g.T;
  const i64 last = (i0 + kWarps < g.T ? i0 + kWarps : g.T) - 1;
  float* q_row = qs + warp * D;
  float* do_row = dos + warp * D;
  float lse_i = 0.0f, delta_i = 0.0f;
  i64 doc_i = 0;
  if (active) {
    load_row(q, g, b, g.Hq, h, i, q_row);
    load_row(dout, g, b, g.Hq, h, i, do_row);
    lse_i = lse[(b * g.Hq + h) * g.T + i];
    delta_i = delta[(b * g.Hq + h) * g.T + i];
    doc_i = doc_of(g, b, i);
  }
  const i64 j_begin = first_visible_key(g, b, i0);

  float acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
  for (i64 jt = j_begin; jt <= last; jt += kTile) {
    __syncthreads();
    load_tile(k, g, b, g.Hkv, kvh, jt, last + 1, ks, ld);
    load_tile(v, g, b, g.Hkv, kvh, jt, last + 1, vs, ld);
    __syncthreads();
    if (!active) continue;
    const i64 j = jt + lane;
    float ds = 0.0f;
    if (j <= last && visible(i, j, g.window, doc_i)) {
      const float p = expf(dot_row(q_row, ks + lane * ld, D) * g.scale - lse_i);
      const float dp = dot_row(do_row, vs + lane * ld, D);
      ds = p * (dp - delta_i);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const float dsj = __shfl_sync(kFull, ds, jj);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int c = lane + 32 * r;
        if (c < D) acc[r] += dsj * ks[jj * ld + c];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int c = lane + 32 * r;
    if (c < D) store(dq, ((b * g.T + i) * g.Hq + h) * g.D + c, acc[r] * g.scale);
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(const T* q, const T* k, const T* v, const float* lse, const T* dout,
                const float* delta, T* dk, T* dv, Geometry g) {
  extern __shared__ float smem[];
  __shared__ i64 query_end;
  const int D = static_cast<int>(g.D), ld = D + 1;
  float* qs = smem;                 // [kTile][ld] query rows
  float* dos = qs + kTile * ld;     // [kTile][ld] their output gradients
  float* lse_s = dos + kTile * ld;  // [kTile]
  float* delta_s = lse_s + kTile;   // [kTile]
  float* krs = delta_s + kTile;     // [kWarps][D]
  float* vrs = krs + kWarps * D;    // [kWarps][D]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 j0 = i64{blockIdx.x} * kWarps, kvh = blockIdx.y, b = blockIdx.z;
  const i64 group = g.Hq / g.Hkv;
  const i64 j = j0 + warp;
  const bool active = j < g.T;
  const i64 last_key = (j0 + kWarps < g.T ? j0 + kWarps : g.T) - 1;
  float* k_row = krs + warp * D;
  float* v_row = vrs + warp * D;
  if (active) {
    load_row(k, g, b, g.Hkv, kvh, j, k_row);
    load_row(v, g, b, g.Hkv, kvh, j, v_row);
  }
  if (threadIdx.x == 0) query_end = detail::query_end_for_keys(g, b, last_key);
  __syncthreads();
  const i64 i_end = query_end;

  float acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc_k[r] = acc_v[r] = 0.0f;
  for (i64 h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (i64 it = j0; it < i_end; it += kTile) {
      __syncthreads();
      load_tile(q, g, b, g.Hq, h, it, i_end, qs, ld);
      load_tile(dout, g, b, g.Hq, h, it, i_end, dos, ld);
      if (threadIdx.x < kTile) {
        const i64 i = it + threadIdx.x;
        lse_s[threadIdx.x] = i < i_end ? lse[(b * g.Hq + h) * g.T + i] : 0.0f;
        delta_s[threadIdx.x] = i < i_end ? delta[(b * g.Hq + h) * g.T + i] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      const i64 i = it + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < i_end && visible(i, j, g.window, doc_of(g, b, i))) {
        p = expf(dot_row(qs + lane * ld, k_row, D) * g.scale - lse_s[lane]);
        const float dp = dot_row(dos + lane * ld, v_row, D);
        ds = p * (dp - delta_s[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(kFull, p, ii);
        const float dsi = __shfl_sync(kFull, ds, ii);
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          const int c = lane + 32 * r;
          if (c < D) {
            acc_v[r] += pi * dos[ii * ld + c];
            acc_k[r] += dsi * qs[ii * ld + c];
          }
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int c = lane + 32 * r;
    if (c < D) {
      const i64 at = ((b * g.T + j) * g.Hkv + kvh) * g.D + c;
      store(dk, at, acc_k[r] * g.scale);
      store(dv, at, acc_v[r]);
    }
  }
}

__global__ void check_doc_start_kernel(const i64* doc_start, i64 B, i64 T, DeviceError* error) {
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < B * T;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 t = e % T, s = doc_start[e];
    if (s < 0 || s > t || (t > 0 && s < doc_start[e - 1]))
      detail::report(error, kBadDocStart, s, e);
  }
}

std::size_t forward_smem(i64 D) { return sizeof(float) * (2 * kTile * (D + 1) + kWarps * D); }
std::size_t dq_smem(i64 D) { return sizeof(float) * (2 * kTile * (D + 1) + 2 * kWarps * D); }
std::size_t dkdv_smem(i64 D) {
  return sizeof(float) * (2 * kTile * (D + 1) + 2 * kTile + 2 * kWarps * D);
}

template <typename T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const Geometry& g,
             cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((g.T + kWarps - 1) / kWarps), static_cast<unsigned>(g.Hq),
                  static_cast<unsigned>(g.B));
  const std::size_t smem = forward_smem(g.D);
  detail::allow_smem(forward_kernel<T>, smem, "attention_forward");
  forward_kernel<T><<<grid, kWarps * 32, smem, stream>>>(q, k, v, out, lse, g);
  check_launch("attention_forward");
}

template <typename T>
void backward(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout,
              T* dq, T* dk, T* dv, float* delta, const Geometry& g, cudaStream_t stream) {
  attention_delta(std::is_same_v<T, float> ? Elem::f32 : Elem::bf16, out, dout, delta, g.B, g.T,
                  g.Hq, g.D, stream);
  const unsigned tiles = static_cast<unsigned>((g.T + kWarps - 1) / kWarps);
  const std::size_t dq_bytes = dq_smem(g.D);
  detail::allow_smem(dq_kernel<T>, dq_bytes, "attention_backward (dq)");
  dq_kernel<T><<<dim3(tiles, static_cast<unsigned>(g.Hq), static_cast<unsigned>(g.B)), kWarps * 32,
                 dq_bytes, stream>>>(q, k, v, lse, dout, delta, dq, g);
  check_launch("attention_backward (dq)");
  const std::size_t dkdv_bytes = dkdv_smem(g.D);
  detail::allow_smem(dkdv_kernel<T>, dkdv_bytes, "attention_backward (dk, dv)");
  dkdv_kernel<T><<<dim3(tiles, static_cast<unsigned>(g.Hkv), static_cast<unsigned>(g.B)),
                   kWarps * 32, dkdv_bytes, stream>>>(q, k, v, lse, dout, delta, dk, dv, g);
  check_launch("attention_backward (dk, dv)");
}

}  // namespace

void check_doc_start(const i64* doc_start, i64 B, i64 T, DeviceError* error, cudaStream_t stream) {
  if (B * T == 0) return;
  check_doc_start_kernel<<<detail::grid_for(B * T, 256), 256, 0, stream>>>(doc_start, B, T, error);
  check_launch("attention (document starts)");
}

void attention_delta(Elem t, const void* out, const void* dout, float* delta, i64 B, i64 T, i64 Hq,
                     i64 D, cudaStream_t stream) {
  const i64 rows = B * T * Hq;
  if (rows == 0) return;
  const Geometry g{B, T, Hq, Hq, D, 0, 1.0f, nullptr};
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  if (t == Elem::f32)
    delta_kernel<<<blocks, kWarps * 32, 0, stream>>>(static_cast<const float*>(out),
                                                     static_cast<const float*>(dout), delta, g);
  else
    delta_kernel<<<blocks, kWarps * 32, 0, stream>>>(static_cast<const bf16*>(out),
                                                     static_cast<const bf16*>(dout), delta, g);
  check_launch("attention_backward (delta)");
}

void attention_forward(Elem t, const void* q, const void* k, const void* v, void* out, float* lse,
                       i64 B, i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                       const i64* doc_start, cudaStream_t stream) {
  if (B * T == 0) return;
  const Geometry g{B, T, Hq, Hkv, D, window, scale, doc_start};
  if (t == Elem::f32)
    forward(static_cast<const float*>(q), static_cast<const float*>(k),
            static_cast<const float*>(v), static_cast<float*>(out), lse, g, stream);
  else
    forward(static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
            static_cast<bf16*>(out), lse, g, stream);
}

void attention_backward(Elem t, const void* q, const void* k, const void* v, const void* out,
                        const float* lse, const void* dout, void* dq, void* dk, void* dv, i64 B,
                        i64 T, i64 Hq, i64 Hkv, i64 D, i64 window, float scale,
                        const i64* doc_start, float* delta, cudaStream_t stream) {
  if (B * T == 0) return;
  const Geometry g{B, T, Hq, Hkv, D, window, scale, doc_start};
  if (t == Elem::f32)
    backward(static_cast<const float*>(q), static_cast<const float*>(k),
             static_cast<const float*>(v), static_cast<const float*>(out), lse,
             static_cast<const float*>(dout), static_cast<float*>(dq), static_cast<float*>(dk),
             static_cast<float*>(dv), delta, g, stream);
  else
    backward(static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
             static_cast<const bf16*>(out), lse, static_cast<const bf16*>(dout),
             static_cast<bf16*>(dq), static_cast<bf16*>(dk), static_cast<bf16*>(dv), delta, g,
             stream);
}

}  // namespace tandem::kernels::cuda
