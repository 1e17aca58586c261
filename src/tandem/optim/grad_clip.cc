#include "tandem/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem::optim {

double sum_of_squares(kernels::Backend& backend, std::span<const kernels::Tensor> grads) {
  double total = 0.0;
  for (double s : backend.sums_of_squares(grads)) total += s;  // in the tensors' order
  return total;
}

double global_grad_norm(kernels::Backend& backend, std::span<const kernels::Tensor> grads) {
  return std::sqrt(sum_of_squares(backend, grads));
}

double clip_coefficient(double total_norm, double max_norm) {
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_grads(kernels::Backend& backend, std::span<const kernels::Tensor> grads,
                 double total_norm, double max_norm) {
  TANDEM_CHECK(max_norm > 0.0, "gradient clipping: max_grad_norm must be > 0, got {}", max_norm);
  if (!std::isfinite(total_norm)) return;
  const double coef = clip_coefficient(total_norm, max_norm);
  if (coef >= 1.0) return;
  for (const kernels::Tensor& g : grads) backend.scale(g, static_cast<float>(coef));
}

double clip_grad_norm(kernels::Backend& backend, std::span<const kernels::Tensor> grads,
                      double max_norm) {
  const double norm = global_grad_norm(backend, grads);
  scale_grads(backend, grads, norm, max_norm);
  return norm;
}

}  // namespace tandem::optim
