// The row part of the fused lm_head + cross-entropy + z-loss (the logits gemm and the gradient
// gemms are cuBLASLt calls in cuda_backend.cc), and log-probabilities for downstream scoring.
// One block per row of logits (fp32, or bf16 as the bf16 lm_head's gemm rounded them): max, the sum
// of exp(x - max) in double, lse, the loss terms in double, then the gradient row in place, rounded
// once to the logits' type (kernels/cpu/cross_entropy.cc's formulas), each thread over groups of 8
// consecutive logits (16-byte accesses where the rows allow: packed_access.cuh). The row (400 KB
// of fp32 or 200 KB of bf16 at OLMo's vocabulary) is read three times and written once: the
// gradient pass takes exp(x - max) again rather than the sum pass storing it, which would cost a
// write and a read of the row for the same bits.
#include "tandem/kernels/cuda/packed_access.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;
using detail::Floats;
using detail::for_each_group_in_row;
using detail::load_floats;
using detail::store_floats;

constexpr int kThreads = 512;

template <typename L>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(L* logits, const i64* labels, i64 V, i64 ignore_index, float z_weight,
                              float grad_scale, bool want_grads, double* row_ce, double* row_z,
                              bool packed) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const i64 r = blockIdx.x;
  L* row = logits + r * V;
  const i64 label = labels[r];
  if (label == ignore_index) {
    if (threadIdx.x == 0) row_ce[r] = row_z[r] = 0.0;
    if (want_grads) {
      for_each_group_in_row(V, packed, [&](i64 c, auto width) {
        store_floats(row, c, Floats<decltype(width)::value>{});
      });
    }
    return;
  }
  // Read by every thread before the row is overwritten.
  const float label_logit = detail::load(row, label);
  float row_max = detail::MaxF{}.identity();
  for_each_group_in_row(V, packed, [&](i64 c, auto width) {
    for (float v : load_floats<decltype(width)::value>(row, c).v) row_max = fmaxf(row_max, v);
  });
  row_max = detail::block_reduce(row_max, fscratch, detail::MaxF{});
  double sum = 0.0;
  for_each_group_in_row(V, packed, [&](i64 c, auto width) {
    for (float v : load_floats<decltype(width)::value>(row, c).v)
      sum += static_cast<double>(expf(v - row_max));
  });
  sum = detail::block_reduce(sum, dscratch, detail::SumD{});
  const double lse = static_cast<double>(row_max) + log(sum);
  if (threadIdx.x == 0) {
    row_ce[r] = lse - static_cast<double>(label_logit);
    row_z[r] = lse * lse;
  }
  if (!want_grads) return;
  // d/dlogit of grad_scale * (lse - logit[label] + z * lse^2)
  //   = grad_scale * (softmax * (1 + 2 z lse) - onehot); softmax = exp / sum.
  const float coef = static_cast<float>(static_cast<double>(grad_scale) *
                                        (1.0 + 2.0 * static_cast<double>(z_weight) * lse) / sum);
  for_each_group_in_row(V, packed, [&](i64 c, auto width) {
    constexpr int W = decltype(width)::value;
    Floats<W> g = load_floats<W>(row, c);
    for (int e = 0; e < W; ++e) {
      g.v[e] = expf(g.v[e] - row_max) * coef;
      if (c + e == label) g.v[e] -= grad_scale;
    }
    store_floats(row, c, g);
  });
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    token_log_probs_kernel(const T* logits, const i64* targets, i64 V, double* out) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const i64 r = blockIdx.x;
  const T* row = logits + r * V;
  float row_max = detail::MaxF{}.identity();
  for (i64 c = threadIdx.x; c < V; c += blockDim.x) row_max = fmaxf(row_max, detail::load(row, c));
  row_max = detail::block_reduce(row_max, fscratch, detail::MaxF{});
  double sum = 0.0;
  for (i64 c = threadIdx.x; c < V; c += blockDim.x)
    sum += exp(static_cast<double>(detail::load(row, c)) - static_cast<double>(row_max));
  sum = detail::block_reduce(sum, dscratch, detail::SumD{});
  if (threadIdx.x == 0) {
    const i64 t = targets[r];
    // An out-of-range target is caught on the host before the launch (cuda_backend.cc).
    out[r] = static_cast<double>(detail::load(row, t)) - static_cast<double>(row_max) - log(sum);
  }
}

}  // namespace

void cross_entropy_rows(Elem t, void* logits, const i64* labels, i64 rows, i64 V, i64 ignore_index,
                        float z_weight, float grad_scale, bool want_grads, double* row_ce,
                        double* row_z, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  const bool packed = detail::packed_rows(V, {logits});
  if (t == Elem::f32)
    cross_entropy_rows_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(logits), labels, V,
                                                             ignore_index, z_weight, grad_scale,
                                                             want_grads, row_ce, row_z, packed);
  else
    cross_entropy_rows_kernel<<<grid, kThreads, 0, stream>>>(static_cast<bf16*>(logits), labels, V,
                                                             ignore_index, z_weight, grad_scale,
                                                             want_grads, row_ce, row_z, packed);
  check_launch("lm_head_cross_entropy");
}

void token_log_probs(Elem t, const void* logits, const i64* targets, i64 n, i64 V, double* out,
                     cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>(n);
  if (t == Elem::f32)
    token_log_probs_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(logits),
                                                          targets, V, out);
  else
    token_log_probs_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const bf16*>(logits), targets,
                                                          V, out);
  check_launch("token_log_probs");
}

}  // namespace tandem::kernels::cuda
