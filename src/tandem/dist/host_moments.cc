#include "tandem/dist/host_moments.h"

namespace tandem::dist {

std::vector<std::pair<std::span<float>, std::span<float>>> HostMoments::spans(
    const std::vector<std::pair<kernels::Tensor, kernels::Tensor>>& runs) {
  std::vector<std::pair<std::span<float>, std::span<float>>> out;
  if (backend_.host_accessible()) {
    for (const auto& [m, v] : runs)
      out.emplace_back(std::span<float>(m.ptr<float>(), static_cast<std::size_t>(m.numel())),
                       std::span<float>(v.ptr<float>(), static_cast<std::size_t>(v.numel())));
    return out;
  }
  staging_.clear();
  for (const auto& [m, v] : runs) {
    staging_.push_back(kernels::to_host_f32(backend_, m));
    staging_.push_back(kernels::to_host_f32(backend_, v));
  }
  for (std::size_t i = 0; i < runs.size(); ++i)
    out.emplace_back(std::span<float>(staging_[2 * i]), std::span<float>(staging_[2 * i + 1]));
  return out;
}

void HostMoments::upload(const std::vector<std::pair<kernels::Tensor, kernels::Tensor>>& runs) {
  if (backend_.host_accessible()) return;
  for (std::size_t i = 0; i < runs.size() && 2 * i + 1 < staging_.size(); ++i) {
    kernels::from_host_f32(backend_, runs[i].first, staging_[2 * i]);
    kernels::from_host_f32(backend_, runs[i].second, staging_[2 * i + 1]);
  }
}

}  // namespace tandem::dist
