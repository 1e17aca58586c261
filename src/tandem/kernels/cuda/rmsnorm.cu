// RMSNorm in HF's order (kernels/cpu/rmsnorm.cc): rstd from the mean of x^2 summed in double and
// rounded once, normalise, then the weight. One block per row, each thread over groups of 8
// consecutive columns (16-byte accesses where the rows allow: packed_access.cuh); the weight
// gradient is summed in double over fixed chunks of rows, then over the chunks in order (no
// atomics).
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::Floats;
using detail::for_each_group_in_row;
using detail::load;
using detail::load_floats;
using detail::packed_rows;
using detail::store_floats;

constexpr int kThreads = 256;
constexpr i64 kRowChunk = 256;  // rows per partial sum of the weight gradient

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, T* y, float* rstd, i64 d, float eps,
                                       bool packed) {
  __shared__ double scratch[32];
  const i64 r = blockIdx.x;
  const T* xr = x + r * d;
  T* yr = y + r * d;
  double sum_sq = 0.0;
  for_each_group_in_row(d, packed, [&](i64 c, auto width) {
    constexpr int W = decltype(width)::value;  // columns in this call: a pack or one
    const Floats<W> xv = load_floats<W>(xr, c);
    for (int e = 0; e < W; ++e) sum_sq += static_cast<double>(xv.v[e] * xv.v[e]);
  });
  sum_sq = detail::block_reduce(sum_sq, scratch, detail::SumD{});
  const float variance = static_cast<float>(sum_sq / static_cast<double>(d));
  const float inv = 1.0f / sqrtf(variance + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for_each_group_in_row(d, packed, [&](i64 c, auto width) {
    constexpr int W = decltype(width)::value;
    const Floats<W> xv = load_floats<W>(xr, c), wv = load_floats<W>(w, c);
    Floats<W> yv;
    for (int e = 0; e < W; ++e) yv.v[e] = wv.v[e] * (xv.v[e] * inv);
    store_floats<W>(yr, c, yv);
  });
}

template <typename T>
__global__ void rmsnorm_backward_dx_kernel(const T* x, const T* w, const float* rstd, const T* dy,
                                           T* dx, i64 d, bool packed) {
  __shared__ double scratch[32];
  const i64 r = blockIdx.x;
  const T* xr = x + r * d;
  const T* dyr = dy + r * d;
  T* dxr = dx + r * d;
  const float inv = rstd[r];
  double dot = 0.0;
  for_each_group_in_row(d, packed, [&](i64 c, auto width) {
    constexpr int W = decltype(width)::value;
    const Floats<W> xv = load_floats<W>(xr, c), wv = load_floats<W>(w, c),
                    dyv = load_floats<W>(dyr, c);
    for (int e = 0; e < W; ++e) dot += static_cast<double>(dyv.v[e] * wv.v[e] * (xv.v[e] * inv));
  });
  dot = detail::block_reduce(dot, scratch, detail::SumD{});
  const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
  for_each_group_in_row(d, packed, [&](i64 c, auto width) {
    constexpr int W = decltype(width)::value;
    const Floats<W> xv = load_floats<W>(xr, c), wv = load_floats<W>(w, c),
                    dyv = load_floats<W>(dyr, c);
    Floats<W> dxv;
    for (int e = 0; e < W; ++e) dxv.v[e] = inv * (dyv.v[e] * wv.v[e] - (xv.v[e] * inv) * mean_dot);
    store_floats<W>(dxr, c, dxv);
  });
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
  const bool packed = packed_rows(d, {x, w, dy, dx});
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, rstd, dy,
                                                                                   dx, d, packed);
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
  const bool packed = packed_rows(d, {x, w, y});
  if (t == Elem::f32)
    rmsnorm_forward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<const float*>(w), static_cast<float*>(y), rstd, d,
        eps, packed);
  else
    rmsnorm_forward_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(w), static_cast<bf16*>(y), rstd, d,
        eps, packed);
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
