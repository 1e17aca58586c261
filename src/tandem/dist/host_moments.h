// Host spans over Adam moments that live on a backend: the moments themselves where the host can
// address the backend's memory, else a staging copy (downloaded on request, uploaded back after a
// checkpoint load). Shared by the data-parallel optimisers.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "tandem/kernels/backend.h"

namespace tandem::dist {

class HostMoments {
 public:
  explicit HostMoments(kernels::Backend& backend) : backend_(backend) {}
  // Host spans for each (exp_avg, exp_avg_sq) run, in order.
  std::vector<std::pair<std::span<float>, std::span<float>>> spans(
      const std::vector<std::pair<kernels::Tensor, kernels::Tensor>>& runs);
  // After the spans were filled: uploads the staging copy (no-op on host memory).
  void upload(const std::vector<std::pair<kernels::Tensor, kernels::Tensor>>& runs);

 private:
  kernels::Backend& backend_;
  std::vector<std::vector<float>> staging_;  // two per run when the backend is not host memory
};

}  // namespace tandem::dist
