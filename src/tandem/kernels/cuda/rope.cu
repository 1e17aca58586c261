// Rotary position embedding, NeoX rotate-half layout, in place on x[B, T, H, D] (the CPU kernel's
// formulas, kernels/cpu/rope.cc). One thread per rotated pair.
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::load;
using detail::store;

constexpr int kThreads = 256;

template <typename T>
__global__ void rope_kernel(T* x, i64 B, i64 T_, i64 H, i64 D, const float* cos, const float* sin,
                            i64 table_rows, const i64* positions, float sign, DeviceError* error) {
  const i64 half = D / 2;
  const i64 pairs = B * T_ * H * half;
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < pairs;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 i = e % half;
    const i64 bth = e / half;  // (b * T + t) * H + h
    const i64 bt = bth / H;
    const i64 pos = positions ? positions[bt] : bt % T_;
    if (pos < 0 || pos >= table_rows) {
      if (i == 0 && bth % H == 0) detail::report(error, kBadRopePosition, pos, bt);
      continue;
    }
    T* x1 = x + bth * D;
    const float a = load(x1, i), b = load(x1, i + half);
    const float c = cos[pos * half + i], si = sign * sin[pos * half + i];
    // HF: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
    store(x1, i, a * c + (-b) * si);
    store(x1, i + half, b * c + a * si);
  }
}

}  // namespace

void rope(Elem t, void* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
          i64 table_rows, const i64* positions, float sign, DeviceError* error,
          cudaStream_t stream) {
  const i64 pairs = B * T * H * (D / 2);
  if (pairs == 0) return;
  const unsigned grid = detail::grid_for(pairs, kThreads);
  if (t == Elem::f32)
    rope_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(x), B, T, H, D, cos, sin,
                                               table_rows, positions, sign, error);
  else
    rope_kernel<<<grid, kThreads, 0, stream>>>(static_cast<bf16*>(x), B, T, H, D, cos, sin,
                                               table_rows, positions, sign, error);
  check_launch("rope");
}

}  // namespace tandem::kernels::cuda
