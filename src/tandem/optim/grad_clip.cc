#include "tandem/optim/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

// Chunk boundaries depend only on the size, never on the number of threads.
constexpr std::size_t kChunk = 1 << 14;
constexpr int kLanes = 8;

double chunk_sum_of_squares(const float* x, std::size_t n) {
  // Eight independent accumulators in a fixed lane order: vectorisable without reassociation.
  double acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      double v = x[i + l];
      acc[l] += v * v;
    }
  for (; i < n; ++i) {
    double v = x[i];
    acc[0] += v * v;
  }
  double s = 0.0;
  for (double a : acc) s += a;
  return s;
}

}  // namespace

double sum_of_squares(const float* data, std::size_t size) {
  if (size == 0) return 0.0;
  const std::size_t chunks = (size + kChunk - 1) / kChunk;
  if (chunks == 1) return chunk_sum_of_squares(data, size);
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(chunks); ++c) {
    std::size_t lo = static_cast<std::size_t>(c) * kChunk;
    partial[c] = chunk_sum_of_squares(data + lo, std::min(kChunk, size - lo));
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

double global_grad_norm(std::span<const GradBuffer> grads) {
  double total = 0.0;
  for (const GradBuffer& g : grads) total += sum_of_squares(g.data, g.size);
  return std::sqrt(total);
}

double clip_coefficient(double total_norm, double max_norm) {
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_grads(std::span<const GradBuffer> grads, double total_norm, double max_norm) {
  TANDEM_CHECK(max_norm > 0.0, "gradient clipping: max_grad_norm must be > 0, got {}", max_norm);
  if (!std::isfinite(total_norm)) return;
  const double coef = clip_coefficient(total_norm, max_norm);
  if (coef >= 1.0) return;
  const float c = static_cast<float>(coef);
  for (const GradBuffer& g : grads) {
    float* d = g.data;
    const auto n = static_cast<std::int64_t>(g.size);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) d[i] *= c;
  }
}

double clip_grad_norm(std::span<const GradBuffer> grads, double max_norm) {
  double norm = global_grad_norm(grads);
  scale_grads(grads, norm, max_norm);
  return norm;
}

}  // namespace tandem::optim
