// The row part of the fused lm_head + cross-entropy + z-loss (the logits gemm and the gradient
// gemms are cuBLASLt calls in cuda_backend.cc), and log-probabilities for downstream scoring.
// One block per row: max, the sum of exp(x - max) in double, lse, the loss terms in double, then
// the gradient row, in place or as bf16 (kernels/cpu/cross_entropy.cc's formulas). The row (400 KB
// of fp32 at OLMo's vocabulary) is read three times and written once: the gradient pass takes
// exp(x - max) again rather than the sum pass storing it, which would cost a write and a read of
// the row for the same bits.
#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(float* logits, const i64* labels, i64 V, i64 ignore_index,
                              float z_weight, float grad_scale, bool want_grads, double* row_ce,
                              double* row_z, bool bf16_logits, bf16* dlogits_bf16) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const i64 r = blockIdx.x;
  float* row = logits + r * V;
  bf16* out16 = bf16_logits && want_grads ? dlogits_bf16 + r * V : nullptr;
  const i64 label = labels[r];
  if (label == ignore_index) {
    if (threadIdx.x == 0) row_ce[r] = row_z[r] = 0.0;
    if (want_grads) {
      for (i64 c = threadIdx.x; c < V; c += blockDim.x) {
        if (out16)
          out16[c] = detail::to_bf16(0.0f);
        else
          row[c] = 0.0f;
      }
    }
    return;
  }
  // The bf16 lm_head's output: every logit rounded to bf16 as it is read (each pass reads the
  // same rounded values: the rounding is a function of the fp32 logit).
  const auto logit = [&](i64 c) {
    return bf16_logits ? __bfloat162float(detail::to_bf16(row[c])) : row[c];
  };
  const float label_logit = logit(label);  // read by every thread before the row is overwritten
  float row_max = detail::MaxF{}.identity();
  for (i64 c = threadIdx.x; c < V; c += blockDim.x) row_max = fmaxf(row_max, logit(c));
  row_max = detail::block_reduce(row_max, fscratch, detail::MaxF{});
  double sum = 0.0;
  for (i64 c = threadIdx.x; c < V; c += blockDim.x)
    sum += static_cast<double>(expf(logit(c) - row_max));
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
  for (i64 c = threadIdx.x; c < V; c += blockDim.x) {
    float g = expf(logit(c) - row_max) * coef;
    if (c == label) g -= grad_scale;
    if (out16)
      out16[c] = detail::to_bf16(g);
    else
      row[c] = g;
  }
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

void cross_entropy_rows(float* logits, const i64* labels, i64 rows, i64 V, i64 ignore_index,
                        float z_weight, float grad_scale, bool want_grads, double* row_ce,
                        double* row_z, bool bf16_logits, void* dlogits_bf16, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, labels, V, ignore_index, z_weight, grad_scale, want_grads, row_ce, row_z, bf16_logits,
      static_cast<bf16*>(dlogits_bf16));
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
