// The optimiser's arithmetic with the CPU kernels' exact operations (kernels/cpu/optimizer_ops.cc,
// compiled there without FMA contraction): every multiply, add, divide and square root here is an
// explicitly rounded intrinsic, so nvcc cannot contract them either, and the results equal the
// CPU's bit for bit. The update moves 8 elements of each tensor per 16-byte access where the four
// are aligned (packed_access.cuh): the same operations per element, so the same bits.
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::Floats;
using detail::load_floats;
using detail::store_floats;

constexpr int kLanes = 8;            // the CPU's accumulators per chunk
constexpr int kChunksPerBlock = 32;  // 8 threads per chunk, 256 threads per block

// Thread (chunk, lane) sums x[chunk * 16K + 8 m + lane]^2 over m in double, as the CPU's lane
// `lane` does; the chunk's last partial group of 8 goes to lane 0 after its full groups; lane 0
// then adds the 8 accumulators in lane order.
__global__ void sum_of_squares_kernel(const float* x, i64 n, double* partials) {
  __shared__ double lanes[kChunksPerBlock][kLanes];
  const int lane = threadIdx.x % kLanes, local = threadIdx.x / kLanes;
  const i64 chunk = blockIdx.x * i64{kChunksPerBlock} + local;
  const i64 chunks = (n + kSumOfSquaresChunk - 1) / kSumOfSquaresChunk;
  double acc = 0.0;
  if (chunk < chunks) {
    const i64 lo = chunk * kSumOfSquaresChunk;
    const i64 len = n - lo < kSumOfSquaresChunk ? n - lo : kSumOfSquaresChunk;
    const i64 full = len / kLanes * kLanes;
    for (i64 i = lane; i < full; i += kLanes) {
      const double v = x[lo + i];
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    if (lane == 0) {
      for (i64 i = full; i < len; ++i) {
        const double v = x[lo + i];
        acc = __dadd_rn(acc, __dmul_rn(v, v));
      }
    }
  }
  lanes[local][lane] = acc;
  __syncthreads();
  if (lane == 0 && chunk < chunks) {
    double s = 0.0;
    for (int l = 0; l < kLanes; ++l) s = __dadd_rn(s, lanes[local][l]);
    partials[chunk] = s;
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, i64 n, AdamWArgs a,
                             bool packed) {
  detail::for_each_pack(n, packed, [&](i64 i, auto width) {
    constexpr int W = decltype(width)::value;  // elements in this call: a pack or one
    Floats<W> pv = load_floats<W>(p, i), mv = load_floats<W>(m, i), vv = load_floats<W>(v, i);
    const Floats<W> gv = load_floats<W>(g, i);
    for (int e = 0; e < W; ++e) {
      float pk = pv.v[e];
      const float gk = gv.v[e];
      if (a.decay) pk = __fmul_rn(pk, a.decay_factor);
      // torch's lerp: m + w * (g - m) as one fused multiply-add.
      const float mk = __fmaf_rn(a.one_minus_beta1, __fsub_rn(gk, mv.v[e]), mv.v[e]);
      // torch's mul_ then addcmul_: v * beta2 + ((1 - beta2) * g) * g.
      const float vk =
          __fadd_rn(__fmul_rn(vv.v[e], a.beta2), __fmul_rn(__fmul_rn(a.one_minus_beta2, gk), gk));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vk), a.bias_correction2_sqrt), a.eps);
      // torch's addcdiv_: p + (value * m) / denom.
      pv.v[e] = __fadd_rn(pk, __fdiv_rn(__fmul_rn(a.neg_step_size, mk), denom));
      mv.v[e] = mk;
      vv.v[e] = vk;
    }
    store_floats<W>(p, i, pv);
    store_floats<W>(m, i, mv);
    store_floats<W>(v, i, vv);
  });
}

}  // namespace

void sum_of_squares_chunks(const float* x, i64 n, double* partials, cudaStream_t stream) {
  const i64 chunks = (n + kSumOfSquaresChunk - 1) / kSumOfSquaresChunk;
  if (chunks == 0) return;
  const unsigned blocks = static_cast<unsigned>((chunks + kChunksPerBlock - 1) / kChunksPerBlock);
  sum_of_squares_kernel<<<blocks, kChunksPerBlock * kLanes, 0, stream>>>(x, n, partials);
  check_launch("sum_of_squares");
}

void adamw_update(float* p, const float* g, float* m, float* v, i64 n, const AdamWArgs& a,
                  cudaStream_t stream) {
  if (n == 0) return;
  const bool packed = detail::packed_operands({p, g, m, v});
  adamw_kernel<<<detail::grid_for_packs(n, packed, 256), 256, 0, stream>>>(p, g, m, v, n, a,
                                                                           packed);
  check_launch("adamw_update");
}

}  // namespace tandem::kernels::cuda
