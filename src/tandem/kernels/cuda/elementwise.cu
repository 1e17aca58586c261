// Elementwise kernels: fill, scale, add, SwiGLU, row gather and the f32 <-> bf16 casts. Grid-stride
// loops; each element is computed by one thread with the CPU kernels' formulas.
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::grid_for;
using detail::load;
using detail::store;

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
__global__ void add_kernel(const T* a, const T* b, T* y, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n; i += i64{gridDim.x} * blockDim.x)
    store(y, i, load(a, i) + load(b, i));
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* g, const T* u, T* h, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n;
       i += i64{gridDim.x} * blockDim.x) {
    const float gv = load(g, i);
    const float silu = gv / (1.0f + expf(-gv));  // torch's silu: x / (1 + exp(-x))
    store(h, i, silu * load(u, i));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* g, const T* u, const T* dh, T* dg, T* du, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n;
       i += i64{gridDim.x} * blockDim.x) {
    const float gv = load(g, i), uv = load(u, i), dhv = load(dh, i);  // u before du (may alias)
    const float sig = 1.0f / (1.0f + expf(-gv));
    store(dg, i, dhv * uv * (sig * (1.0f + gv * (1.0f - sig))));  // d silu / dg
    store(du, i, dhv * (gv * sig));
  }
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

__global__ void f32_to_bf16_kernel(const float* src, bf16* dst, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n; i += i64{gridDim.x} * blockDim.x)
    dst[i] = detail::to_bf16(src[i]);
}

__global__ void bf16_to_f32_kernel(const bf16* src, float* dst, i64 n) {
  for (i64 i = blockIdx.x * i64{blockDim.x} + threadIdx.x; i < n; i += i64{gridDim.x} * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
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
  if (t == Elem::f32)
    add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(y), n);
  else
    add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(a), static_cast<const bf16*>(b), static_cast<bf16*>(y), n);
  check_launch("add");
}

void swiglu_forward(Elem t, const void* g, const void* u, void* h, i64 n, cudaStream_t stream) {
  if (t == Elem::f32)
    swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(g), static_cast<const float*>(u), static_cast<float*>(h), n);
  else
    swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(g), static_cast<const bf16*>(u), static_cast<bf16*>(h), n);
  check_launch("swiglu_forward");
}

void swiglu_backward(Elem t, const void* g, const void* u, const void* dh, void* dg, void* du,
                     i64 n, cudaStream_t stream) {
  if (t == Elem::f32)
    swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(g), static_cast<const float*>(u), static_cast<const float*>(dh),
        static_cast<float*>(dg), static_cast<float*>(du), n);
  else
    swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(g), static_cast<const bf16*>(u), static_cast<const bf16*>(dh),
        static_cast<bf16*>(dg), static_cast<bf16*>(du), n);
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
  if (from == Elem::f32 && to == Elem::bf16) {
    f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(src), static_cast<bf16*>(dst), n);
  } else if (from == Elem::bf16 && to == Elem::f32) {
    bf16_to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const bf16*>(src), static_cast<float*>(dst), n);
  } else {
    cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * (from == Elem::f32 ? 4 : 2),
                    cudaMemcpyDeviceToDevice, stream);
  }
  check_launch("cast");
}

}  // namespace tandem::kernels::cuda
