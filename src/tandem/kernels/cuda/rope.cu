// Rotary position embedding, NeoX rotate-half layout, in place on x[B, T, H, D] (the CPU kernel's
// formulas, kernels/cpu/rope.cc). One thread per rotated pair, or per 8 consecutive pairs in
// 16-byte accesses where the rows allow (the same arithmetic per pair, so the same bits).
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::Floats;
using detail::grid_for;
using detail::kPackElems;
using detail::load_floats;
using detail::packed_operands;
using detail::store_floats;

constexpr int kThreads = 256;

// W consecutive pairs per thread: kPackElems in 16-byte accesses where the rows allow, else 1.
template <int W, typename T>
__global__ void rope_kernel(T* x, i64 B, i64 T_, i64 H, i64 D, const float* cos, const float* sin,
                            i64 table_rows, const i64* positions, float sign, DeviceError* error) {
  const i64 half = D / 2;
  const i64 groups = half / W;  // per row
  const i64 units = B * T_ * H * groups;
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < units;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 i = e % groups * W;
    const i64 bth = e / groups;  // (b * T + t) * H + h
    const i64 bt = bth / H;
    const i64 pos = positions ? positions[bt] : bt % T_;
    if (pos < 0 || pos >= table_rows) {
      if (i == 0 && bth % H == 0) detail::report(error, kBadRopePosition, pos, bt);
      continue;
    }
    T* x1 = x + bth * D;
    const Floats<W> a = load_floats<W>(x1, i), b = load_floats<W>(x1, i + half);
    const Floats<W> c = load_floats<W>(cos + pos * half, i),
                    s = load_floats<W>(sin + pos * half, i);
    Floats<W> first, second;
    for (int k = 0; k < W; ++k) {
      const float si = sign * s.v[k];
      // HF: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
      first.v[k] = a.v[k] * c.v[k] + (-b.v[k]) * si;
      second.v[k] = b.v[k] * c.v[k] + a.v[k] * si;
    }
    store_floats<W>(x1, i, first);
    store_floats<W>(x1, i + half, second);
  }
}

template <typename T>
void launch(T* x, i64 B, i64 T_, i64 H, i64 D, const float* cos, const float* sin, i64 table_rows,
            const i64* positions, float sign, DeviceError* error, cudaStream_t stream) {
  // Packs need whole groups of pairs in each half and aligned rows of x and of the tables.
  const i64 half = D / 2;
  const i64 pairs = B * T_ * H * half;
  if (half % kPackElems == 0 && packed_operands({x, cos, sin}))
    rope_kernel<kPackElems, T><<<grid_for(pairs / kPackElems, kThreads), kThreads, 0, stream>>>(
        x, B, T_, H, D, cos, sin, table_rows, positions, sign, error);
  else
    rope_kernel<1, T><<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        x, B, T_, H, D, cos, sin, table_rows, positions, sign, error);
}

}  // namespace

void rope(Elem t, void* x, i64 B, i64 T, i64 H, i64 D, const float* cos, const float* sin,
          i64 table_rows, const i64* positions, float sign, DeviceError* error,
          cudaStream_t stream) {
  const i64 pairs = B * T * H * (D / 2);
  if (pairs == 0) return;
  if (t == Elem::f32)
    launch(static_cast<float*>(x), B, T, H, D, cos, sin, table_rows, positions, sign, error,
           stream);
  else
    launch(static_cast<bf16*>(x), B, T, H, D, cos, sin, table_rows, positions, sign, error, stream);
  check_launch("rope");
}

}  // namespace tandem::kernels::cuda
