// Global L2 gradient-norm clipping as torch.nn.utils.clip_grad_norm_ (and OLMo-core's train
// module) does it: norm over every gradient together, coefficient max_norm / (norm + 1e-6) clamped
// to 1, every gradient scaled by it. Each tensor's sum of squares is the backend's deterministic
// sum_of_squares (double, fixed chunk order; all tensors' at once, so a GPU backend waits for the
// device once), and the tensors' sums are added in the given order, so the norm does not depend on
// the thread count.
#pragma once

#include <span>

#include "tandem/kernels/backend.h"

namespace tandem::optim {

// Ordered sum over the tensors of their sums of squares (a distributed caller adds the ranks'
// partial sums before taking the square root).
double sum_of_squares(kernels::Backend& backend, std::span<const kernels::Tensor> grads);

// The global L2 norm of all tensors.
double global_grad_norm(kernels::Backend& backend, std::span<const kernels::Tensor> grads);

// torch's clip coefficient for a given pre-clip norm: min(1, max_norm / (norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);

// Scales every gradient by clip_coefficient(total_norm, max_norm) (nothing is touched when the
// coefficient is 1 or the norm is not finite; the caller skips such a step).
void scale_grads(kernels::Backend& backend, std::span<const kernels::Tensor> grads,
                 double total_norm, double max_norm);

// Computes the global norm, clips, and returns the PRE-clip norm (what OLMo-core logs as
// "total grad norm" and feeds to the skip-step rule).
double clip_grad_norm(kernels::Backend& backend, std::span<const kernels::Tensor> grads,
                      double max_norm);

}  // namespace tandem::optim
