// The optimiser's arithmetic with the CPU kernels' exact operations (kernels/cpu/optimizer_ops.cc,
// compiled there without FMA contraction): every multiply, add, divide and square root here is an
// explicitly rounded intrinsic, so nvcc cannot contract them either, and the results equal the
// CPU's bit for bit. The gradient norm's sums of squares and AdamW's update each take every
// parameter tensor in one launch (a table of the tensors; each block works on one tensor's chunk
// or 2048 elements). AdamW moves 8 elements of each operand per 16-byte access where the four are
// aligned (packed_access.cuh): the same operations per element, so the same bits.
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::Floats;
using detail::load_floats;
using detail::store_floats;

constexpr int kAdamWThreads = static_cast<int>(kAdamWBlockElems / detail::kPackElems);
static_assert(kAdamWThreads == 256);
constexpr int kLanes = 8;            // the CPU's accumulators per chunk
constexpr int kChunksPerBlock = 32;  // 8 threads per chunk, 256 threads per block

// The entry of a tensor table (count entries in ascending `first`) whose range holds index i: the
// last with first(entry) <= i, by binary search (threads asking with the same i load the same
// entries: broadcasts from the cache).
template <typename Entry, typename First>
__device__ __forceinline__ Entry entry_holding(const Entry* table, int count, i64 i, First first) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first(table[mid]) <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return table[lo];
}

// Chunk c of all the tables' chunks is chunk c - first_chunk of its tensor. Thread (chunk, lane)
// sums x[chunk * 16K + 8 m + lane]^2 over m in double, as the CPU's lane `lane` does; the chunk's
// last partial group of 8 goes to lane 0 after its full groups; lane 0 then adds the 8
// accumulators in lane order.
__global__ void sum_of_squares_kernel(const SumOfSquaresTensor* tensors, int count, i64 chunks,
                                      double* partials) {
  __shared__ double lanes[kChunksPerBlock][kLanes];
  const int lane = threadIdx.x % kLanes, local = threadIdx.x / kLanes;
  const i64 c = blockIdx.x * i64{kChunksPerBlock} + local;
  double acc = 0.0;
  if (c < chunks) {
    const SumOfSquaresTensor t =
        entry_holding(tensors, count, c, [](const SumOfSquaresTensor& e) { return e.first_chunk; });
    const i64 lo = (c - t.first_chunk) * kSumOfSquaresChunk;
    const i64 len = t.n - lo < kSumOfSquaresChunk ? t.n - lo : kSumOfSquaresChunk;
    const i64 full = len / kLanes * kLanes;
    for (i64 i = lane; i < full; i += kLanes) {
      const double v = t.x[lo + i];
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    if (lane == 0) {
      for (i64 i = full; i < len; ++i) {
        const double v = t.x[lo + i];
        acc = __dadd_rn(acc, __dmul_rn(v, v));
      }
    }
  }
  lanes[local][lane] = acc;
  __syncthreads();
  if (lane == 0 && c < chunks) {
    double s = 0.0;
    for (int l = 0; l < kLanes; ++l) s = __dadd_rn(s, lanes[local][l]);
    partials[c] = s;
  }
}

// torch's lerp: m + w * (g - m) for w < 0.5, else g - (g - m) * (1 - w), one fused multiply-add
// each (`one_minus_w` is fp32 1 - w), as the CPU kernel.
__device__ __forceinline__ float torch_lerp(float m, float g, float w, float one_minus_w) {
  const float d = __fsub_rn(g, m);
  return w < 0.5f ? __fmaf_rn(w, d, m) : __fmaf_rn(-d, one_minus_w, g);
}

// AdamW on W consecutive elements of one tensor from i, in the CPU kernel's operations.
template <int W>
__device__ __forceinline__ void adamw_elements(const AdamWTensor& t, i64 i, const AdamWArgs& a) {
  Floats<W> pv = load_floats<W>(t.p, i), mv = load_floats<W>(t.m, i), vv = load_floats<W>(t.v, i);
  const Floats<W> gv = load_floats<W>(t.g, i);
  for (int e = 0; e < W; ++e) {
    float pk = pv.v[e];
    const float gk = gv.v[e];
    if (t.decay != 0) pk = __fmul_rn(pk, a.decay_factor);
    float mk, vk, step;
    if (a.arithmetic == AdamWArithmetic::olmo_core_foreach) {
      // OLMo-core's foreach ops: m * beta1 + g * (1 - beta1), v * beta2 + (g * g) * (1 - beta2),
      // p + (m / denom) * -step_size.
      mk = __fadd_rn(__fmul_rn(mv.v[e], a.beta1), __fmul_rn(gk, a.one_minus_beta1));
      vk = __fadd_rn(__fmul_rn(vv.v[e], a.beta2), __fmul_rn(__fmul_rn(gk, gk), a.one_minus_beta2));
    } else if (a.arithmetic == AdamWArithmetic::olmo_core_single) {
      // OLMo-core's adamw_step: lerp_, mul_ then add_(g * g, alpha) (a fused add).
      mk = torch_lerp(mv.v[e], gk, a.one_minus_beta1, a.beta1);
      vk = __fmaf_rn(__fmul_rn(gk, gk), a.one_minus_beta2, __fmul_rn(vv.v[e], a.beta2));
    } else {
      // torch's AdamW: lerp_, mul_ then addcmul_: ((1 - beta2) * g) * g + v * beta2, fused.
      mk = torch_lerp(mv.v[e], gk, a.one_minus_beta1, a.beta1);
      vk = __fmaf_rn(__fmul_rn(a.one_minus_beta2, gk), gk, __fmul_rn(vv.v[e], a.beta2));
    }
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vk), a.bias_correction2_sqrt), a.eps);
    if (a.arithmetic == AdamWArithmetic::torch_adamw)  // torch's addcdiv_: p + (value * m) / denom
      step = __fdiv_rn(__fmul_rn(a.neg_step_size, mk), denom);
    else  // OLMo-core: (m / denom) times -step_size
      step = __fmul_rn(__fdiv_rn(mk, denom), a.neg_step_size);
    pv.v[e] = __fadd_rn(pk, step);
    mv.v[e] = mk;
    vv.v[e] = vk;
  }
  store_floats<W>(t.p, i, pv);
  store_floats<W>(t.m, i, mv);
  store_floats<W>(t.v, i, vv);
}

// Block b updates elements [2048 k, 2048 (k + 1)) of the tensor whose blocks hold b (the last with
// first_block <= b; a binary search of the table), k = b - first_block: thread j the 8 from
// 2048 k + 8 j as one pack where `packing` and the tensor's four operands are 16-byte aligned, else
// elements 2048 k + j + 256 e one at a time (coalesced across the warp).
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_tensors_kernel(const AdamWTensor* tensors, int count, AdamWArgs a, bool packing) {
  const i64 b = blockIdx.x;
  const AdamWTensor t =
      entry_holding(tensors, count, b, [](const AdamWTensor& e) { return e.first_block; });
  const i64 base = (b - t.first_block) * kAdamWBlockElems;
  const i64 end = base + kAdamWBlockElems < t.n ? base + kAdamWBlockElems : t.n;
  const auto address = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q); };
  const bool packed =
      packing && (address(t.p) | address(t.g) | address(t.m) | address(t.v)) % 16 == 0;
  if (packed) {
    const i64 i = base + i64{threadIdx.x} * detail::kPackElems;
    if (i + detail::kPackElems <= end) {
      adamw_elements<detail::kPackElems>(t, i, a);
    } else {
      for (i64 e = i; e < end; ++e) adamw_elements<1>(t, e, a);
    }
  } else {
    for (i64 e = base + threadIdx.x; e < end; e += kAdamWThreads) adamw_elements<1>(t, e, a);
  }
}

}  // namespace

void sum_of_squares_tensors(const SumOfSquaresTensor* tensors, int count, i64 chunks,
                            double* partials, cudaStream_t stream) {
  if (chunks == 0) return;
  const unsigned blocks = static_cast<unsigned>((chunks + kChunksPerBlock - 1) / kChunksPerBlock);
  sum_of_squares_kernel<<<blocks, kChunksPerBlock * kLanes, 0, stream>>>(tensors, count, chunks,
                                                                         partials);
  check_launch("sum_of_squares");
}

void adamw_update_tensors(const AdamWTensor* tensors, int count, i64 blocks, const AdamWArgs& a,
                          cudaStream_t stream) {
  if (blocks == 0) return;
  adamw_tensors_kernel<<<static_cast<unsigned>(blocks), kAdamWThreads, 0, stream>>>(
      tensors, count, a, detail::packed_access_enabled());
  check_launch("adamw_update");
}

}  // namespace tandem::kernels::cuda
