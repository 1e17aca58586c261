// RMSNorm in HF's order (kernels/cpu/rmsnorm.cc): rstd from the mean of x^2 summed in double and
// rounded once, normalise, then the weight. One block per row; the weight gradient is summed in
// double over fixed chunks of rows, then over the chunks in order (no atomics).
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::load;
using detail::store;

constexpr int kThreads = 256;
constexpr i64 kRowChunk = 256;  // rows per partial sum of the weight gradient

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, T* y, float* rstd, i64 d,
                                       float eps) {
  __shared__ double scratch[32];
  const i64 r = blockIdx.x;
  const T* xr = x + r * d;
  T* yr = y + r * d;
  double sum_sq = 0.0;
  for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = load(xr, c);
    sum_sq += static_cast<double>(v * v);
  }
  sum_sq = detail::block_reduce(sum_sq, scratch, detail::SumD{});
  const float variance = static_cast<float>(sum_sq / static_cast<double>(d));
  const float inv = 1.0f / sqrtf(variance + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (i64 c = threadIdx.x; c < d; c += blockDim.x) store(yr, c, load(w, c) * (load(xr, c) * inv));
}

template <typename T>
__global__ void rmsnorm_backward_dx_kernel(const T* x, const T* w, const float* rstd, const T* dy,
                                           T* dx, i64 d) {
  __shared__ double scratch[32];
  const i64 r = blockIdx.x;
  const T* xr = x + r * d;
  const T* dyr = dy + r * d;
  T* dxr = dx + r * d;
  const float inv = rstd[r];
  double dot = 0.0;
  for (i64 c = threadIdx.x; c < d; c += blockDim.x)
    dot += static_cast<double>(load(dyr, c) * load(w, c) * (load(xr, c) * inv));
  dot = detail::block_reduce(dot, scratch, detail::SumD{});
  const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
  for (i64 c = threadIdx.x; c < d; c += blockDim.x)
    store(dxr, c, inv * (load(dyr, c) * load(w, c) - (load(xr, c) * inv) * mean_dot));
}

// partials[chunk * d + c] = sum over the chunk's rows of dy * xhat, in row order.
template <typename T>
__global__ void rmsnorm_dw_partial_kernel(const T* x, const float* rstd, const T* dy, i64 rows,
                                          i64 d, double* partials) {
  const i64 c = blockIdx.x * i64{kThreads} + threadIdx.x;
  if (c >= d) return;
  const i64 r0 = blockIdx.y * kRowChunk;
  const i64 r1 = r0 + kRowChunk < rows ? r0 + kRowChunk : rows;
  double acc = 0.0;
  for (i64 r = r0; r < r1; ++r)
    acc += static_cast<double>(load(dy, r * d + c) * (load(x, r * d + c) * rstd[r]));
  partials[blockIdx.y * d + c] = acc;
}

__global__ void rmsnorm_dw_finish_kernel(const double* partials, i64 chunks, i64 d, float* dw) {
  const i64 c = blockIdx.x * i64{kThreads} + threadIdx.x;
  if (c >= d) return;
  double acc = 0.0;
  for (i64 k = 0; k < chunks; ++k) acc += partials[k * d + c];
  dw[c] += static_cast<float>(acc);
}

template <typename T>
void backward(const T* x, const T* w, const float* rstd, const T* dy, T* dx, float* dw, i64 rows,
              i64 d, double* partials, cudaStream_t stream) {
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, rstd, dy,
                                                                                   dx, d);
  check_launch("rmsnorm_backward");
  if (dw == nullptr) return;
  const i64 chunks = (rows + kRowChunk - 1) / kRowChunk;
  const unsigned column_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
  rmsnorm_dw_partial_kernel<<<dim3(column_blocks, static_cast<unsigned>(chunks)), kThreads, 0,
                              stream>>>(x, rstd, dy, rows, d, partials);
  check_launch("rmsnorm_backward (dw partial sums)");
  rmsnorm_dw_finish_kernel<<<column_blocks, kThreads, 0, stream>>>(partials, chunks, d, dw);
  check_launch("rmsnorm_backward (dw)");
}

}  // namespace

void rmsnorm_forward(Elem t, const void* x, const void* w, void* y, float* rstd, i64 rows, i64 d,
                     float eps, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (t == Elem::f32)
    rmsnorm_forward_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                          static_cast<const float*>(w),
                                                          static_cast<float*>(y), rstd, d, eps);
  else
    rmsnorm_forward_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(x),
                                                          static_cast<const bf16*>(w),
                                                          static_cast<bf16*>(y), rstd, d, eps);
  check_launch("rmsnorm_forward");
}

std::size_t rmsnorm_dw_partials(i64 rows, i64 d) {
  return static_cast<std::size_t>((rows + kRowChunk - 1) / kRowChunk * d);
}

void rmsnorm_backward(Elem t, const void* x, const void* w, const float* rstd, const void* dy,
                      void* dx, float* dw, i64 rows, i64 d, double* partials, cudaStream_t stream) {
  if (rows == 0) return;
  if (t == Elem::f32)
    backward(static_cast<const float*>(x), static_cast<const float*>(w), rstd,
             static_cast<const float*>(dy), static_cast<float*>(dx), dw, rows, d, partials, stream);
  else
    backward(static_cast<const bf16*>(x), static_cast<const bf16*>(w), rstd,
             static_cast<const bf16*>(dy), static_cast<bf16*>(dx), dw, rows, d, partials, stream);
}

}  // namespace tandem::kernels::cuda
