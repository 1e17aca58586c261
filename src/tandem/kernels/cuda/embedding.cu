// Embedding lookup and its deterministic gradient. The backward owns each table row in one block
// (per column chunk): the host hands over the token indices stably sorted by id, so a row's
// gradient is the running sum dtable[id] += dout[t] over its tokens in token order, exactly the
// CPU kernel's order, with no atomics.
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;

constexpr int kThreads = 256;

template <typename Tin, typename Tout>
__global__ void embedding_forward_kernel(const i64* ids, const Tin* table, Tout* out, i64 T_, i64 d,
                                         i64 V, DeviceError* error) {
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < T_ * d;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 t = e / d, c = e % d;
    const i64 id = ids[t];
    if (id < 0 || id >= V) {
      if (c == 0) detail::report(error, kBadEmbeddingId, id, t);
      continue;
    }
    detail::move(out, e, table, id * d + c);
  }
}

// Block (segment, column chunk): one distinct id and kThreads of its columns.
template <typename T>
__global__ void embedding_backward_kernel(const i64* ids, const T* dout, float* dtable, i64 d,
                                          const int* order, const int* segment_start) {
  const i64 c = blockIdx.y * i64{kThreads} + threadIdx.x;
  if (c >= d) return;
  const int begin = segment_start[blockIdx.x], end = segment_start[blockIdx.x + 1];
  const i64 id = ids[order[begin]];
  float acc = dtable[id * d + c];
  for (int k = begin; k < end; ++k) acc += detail::load(dout, i64{order[k]} * d + c);
  dtable[id * d + c] = acc;
}

}  // namespace

void embedding_forward(Elem table_t, Elem out_t, const i64* ids, const void* table, void* out,
                       i64 T, i64 d, i64 V, DeviceError* error, cudaStream_t stream) {
  const unsigned grid = detail::grid_for(T * d, kThreads);
  if (table_t == Elem::f32 && out_t == Elem::f32)
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const float*>(table), static_cast<float*>(out), T, d, V, error);
  else if (table_t == Elem::f32)
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const float*>(table), static_cast<bf16*>(out), T, d, V, error);
  else
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const bf16*>(table), static_cast<bf16*>(out), T, d, V, error);
  check_launch("embedding_forward");
}

void embedding_backward(Elem dout_t, const i64* ids, const void* dout, float* dtable, i64 d,
                        const int* order, const int* segment_start, i64 n_segments,
                        cudaStream_t stream) {
  if (n_segments == 0 || d == 0) return;
  const dim3 grid(static_cast<unsigned>(n_segments),
                  static_cast<unsigned>((d + kThreads - 1) / kThreads));
  if (dout_t == Elem::f32)
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(ids, static_cast<const float*>(dout),
                                                             dtable, d, order, segment_start);
  else
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(ids, static_cast<const bf16*>(dout),
                                                             dtable, d, order, segment_start);
  check_launch("embedding_backward");
}

}  // namespace tandem::kernels::cuda
