// Global L2 gradient-norm clipping as torch.nn.utils.clip_grad_norm_ (and OLMo-core's train
// module) does it: norm over every gradient together, coefficient max_norm / (norm + 1e-6) clamped
// to 1, every gradient scaled by it. The norm is accumulated in double in a fixed order (fixed-size
// chunks summed in index order), so it does not depend on the thread count.
#pragma once

#include <cstddef>
#include <span>

namespace tandem::optim {

struct GradBuffer {
  float* data = nullptr;
  std::size_t size = 0;
};

// Sum of squares of one buffer, in double, thread-count independent. Exposed so a distributed
// caller can add the per-shard partial sums before taking the square root.
double sum_of_squares(const float* data, std::size_t size);

// The global L2 norm of all buffers (sqrt of the ordered sum of their sums of squares).
double global_grad_norm(std::span<const GradBuffer> grads);

// torch's clip coefficient for a given pre-clip norm: min(1, max_norm / (norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);

// Scales every gradient by clip_coefficient(total_norm, max_norm) (nothing is touched when the
// coefficient is 1 or the norm is not finite; the caller skips such a step).
void scale_grads(std::span<const GradBuffer> grads, double total_norm, double max_norm);

// Computes the global norm, clips, and returns the PRE-clip norm (what OLMo-core logs as
// "total grad norm" and feeds to the skip-step rule).
double clip_grad_norm(std::span<const GradBuffer> grads, double max_norm);

}  // namespace tandem::optim
