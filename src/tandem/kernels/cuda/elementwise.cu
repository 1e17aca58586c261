// Elementwise kernels: fill, scale, add, SwiGLU, row gather and the f32 <-> bf16 casts. Grid-stride
// loops; each element is computed by one thread with the CPU kernels' formulas. The bandwidth-bound
// ones over whole tensors (add, SwiGLU, the casts) move 8 elements per 16-byte access where their
// operands are aligned (packed_access.cuh).
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::Floats;
using detail::for_each_pack;
using detail::grid_for;
using detail::grid_for_packs;
using detail::load_floats;
using detail::packed_operands;
using detail::store_floats;

constexpr int kThreads = 256;

__global__ void fill_kernel(float* dst, float value, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n; i += i64{gridDim.x} * blockDim.x)
    dst[i] = value;
}

__global__ void scale_kernel(float* x, float factor, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n; i += i64{gridDim.x} * blockDim.x)
    x[i] *= factor;
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, i64 n, bool packed) {
  for_each_pack(n, packed, [&](i64 i, auto width) {
    constexpr int W = decltype(width)::value;  // elements in this call: a pack or one
    const Floats<W> av = load_floats<W>(a, i), bv = load_floats<W>(b, i);
    Floats<W> yv;
    for (int e = 0; e < W; ++e) yv.v[e] = av.v[e] + bv.v[e];
    store_floats<W>(y, i, yv);
  });
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* g, const T* u, T* h, i64 n, bool packed) {
  for_each_pack(n, packed, [&](i64 i, auto width) {
    constexpr int W = decltype(width)::value;
    const Floats<W> gv = load_floats<W>(g, i), uv = load_floats<W>(u, i);
    Floats<W> hv;
    for (int e = 0; e < W; ++e) {
      const float silu = gv.v[e] / (1.0f + expf(-gv.v[e]));  // torch's silu: x / (1 + exp(-x))
      hv.v[e] = silu * uv.v[e];
    }
    store_floats<W>(h, i, hv);
  });
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* g, const T* u, const T* dh, T* dg, T* du, i64 n,
                                       bool packed) {
  for_each_pack(n, packed, [&](i64 i, auto width) {
    constexpr int W = decltype(width)::value;
    // Every input of the elements is read before any output is written: du may alias u.
    const Floats<W> gv = load_floats<W>(g, i), uv = load_floats<W>(u, i),
                    dhv = load_floats<W>(dh, i);
    Floats<W> dgv, duv;
    for (int e = 0; e < W; ++e) {
      const float sig = 1.0f / (1.0f + expf(-gv.v[e]));
      dgv.v[e] = dhv.v[e] * uv.v[e] * (sig * (1.0f + gv.v[e] * (1.0f - sig)));  // d silu / dg
      duv.v[e] = dhv.v[e] * (gv.v[e] * sig);
    }
    store_floats<W>(dg, i, dgv);
    store_floats<W>(du, i, duv);
  });
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, i64 src_rows, i64 d, const i64* index, i64 n,
                                   T* dst, DeviceError* error) {
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < n * d;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 i = e / d, c = e % d;
    const i64 row = index[i];
    if (row < 0 || row >= src_rows) {
      if (c == 0) detail::report(error, kBadGatherIndex, row, i);
      continue;
    }
    dst[e] = src[row * d + c];
  }
}

// Rounds (f32 -> bf16) or widens exactly (bf16 -> f32).
template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, i64 n, bool packed) {
  for_each_pack(n, packed, [&](i64 i, auto width) {
    constexpr int W = decltype(width)::value;
    store_floats<W>(dst, i, load_floats<W>(src, i));
  });
}

}  // namespace

void fill(float* dst, float value, i64 n, cudaStream_t stream) {
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, value, n);
  check_launch("fill");
}

void scale(float* x, float factor, i64 n, cudaStream_t stream) {
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, factor, n);
  check_launch("scale");
}

void add(Elem t, const void* a, const void* b, void* y, i64 n, cudaStream_t stream) {
  const bool packed = packed_operands({a, b, y});
  const unsigned grid = grid_for_packs(n, packed, kThreads);
  if (t == Elem::f32)
    add_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(a),
                                              static_cast<const float*>(b), static_cast<float*>(y),
                                              n, packed);
  else
    add_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const bf16*>(a), static_cast<const bf16*>(b), static_cast<bf16*>(y), n, packed);
  check_launch("add");
}

void swiglu_forward(Elem t, const void* g, const void* u, void* h, i64 n, cudaStream_t stream) {
  const bool packed = packed_operands({g, u, h});
  const unsigned grid = grid_for_packs(n, packed, kThreads);
  if (t == Elem::f32)
    swiglu_forward_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(g),
                                                         static_cast<const float*>(u),
                                                         static_cast<float*>(h), n, packed);
  else
    swiglu_forward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const bf16*>(g), static_cast<const bf16*>(u), static_cast<bf16*>(h), n, packed);
  check_launch("swiglu_forward");
}

void swiglu_backward(Elem t, const void* g, const void* u, const void* dh, void* dg, void* du,
                     i64 n, cudaStream_t stream) {
  const bool packed = packed_operands({g, u, dh, dg, du});
  const unsigned grid = grid_for_packs(n, packed, kThreads);
  if (t == Elem::f32)
    swiglu_backward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float*>(g), static_cast<const float*>(u), static_cast<const float*>(dh),
        static_cast<float*>(dg), static_cast<float*>(du), n, packed);
  else
    swiglu_backward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const bf16*>(g), static_cast<const bf16*>(u), static_cast<const bf16*>(dh),
        static_cast<bf16*>(dg), static_cast<bf16*>(du), n, packed);
  check_launch("swiglu_backward");
}

void gather_rows(Elem t, const void* src, i64 src_rows, i64 d, const i64* index, i64 n, void* dst,
                 DeviceError* error, cudaStream_t stream) {
  const unsigned grid = grid_for(n * d, kThreads);
  if (t == Elem::f32)
    gather_rows_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(src), src_rows, d,
                                                      index, n, static_cast<float*>(dst), error);
  else
    gather_rows_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(src), src_rows, d,
                                                      index, n, static_cast<bf16*>(dst), error);
  check_launch("gather_rows");
}

void cast(Elem from, Elem to, const void* src, void* dst, i64 n, cudaStream_t stream) {
  const bool packed = packed_operands({src, dst});
  const unsigned grid = grid_for_packs(n, packed, kThreads);
  if (from == Elem::f32 && to == Elem::bf16) {
    cast_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(src),
                                               static_cast<bf16*>(dst), n, packed);
  } else if (from == Elem::bf16 && to == Elem::f32) {
    cast_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(src),
                                               static_cast<float*>(dst), n, packed);
  } else {
    cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * (from == Elem::f32 ? 4 : 2),
                    cudaMemcpyDeviceToDevice, stream);
  }
  check_launch("cast");
}

}  // namespace tandem::kernels::cuda
