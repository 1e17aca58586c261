// Elementwise ops: SwiGLU gate and the residual add.
#include <algorithm>

#include "tandem/kernels/cpu/fast_math.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {
namespace {

using detail::f32x8;
using detail::kLanes;

// Applies op to lane groups [8i, 8i + 8) in parallel and to the tail with 8-lane padding copies.
template <typename Op>
void for_each_lanes(i64 n, Op op) {
  const i64 full = n / kLanes;
#pragma omp parallel for schedule(static)
  for (i64 block = 0; block < full; ++block) op(block * kLanes);
  if (n % kLanes != 0) op(-1);  // tail, handled by op with padded copies
}

}  // namespace

void swiglu_forward(const float* g, const float* u, float* h, i64 n) {
  const i64 tail = n - n % kLanes;
  auto lanes = [&](const float* gp, const float* up, float* hp) {
    const f32x8 gv = detail::load8(gp);
    // torch's silu: x / (1 + exp(-x)).
    const f32x8 silu = gv / (1.0f + detail::exp8(-gv));
    detail::store8(hp, silu * detail::load8(up));
  };
  for_each_lanes(n, [&](i64 i) {
    if (i >= 0) return lanes(g + i, u + i, h + i);
    float gp[kLanes] = {}, up[kLanes] = {}, hp[kLanes];
    std::copy(g + tail, g + n, gp);
    std::copy(u + tail, u + n, up);
    lanes(gp, up, hp);
    std::copy(hp, hp + (n - tail), h + tail);
  });
}

void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, i64 n) {
  const i64 tail = n - n % kLanes;
  auto lanes = [&](const float* gp, const float* up, const float* dhp, float* dgp, float* dup) {
    const f32x8 gv = detail::load8(gp);
    const f32x8 uv = detail::load8(up);
    const f32x8 dhv = detail::load8(dhp);
    const f32x8 sig = 1.0f / (1.0f + detail::exp8(-gv));
    // d silu / dg = sig * (1 + g * (1 - sig)).
    detail::store8(dgp, dhv * uv * (sig * (1.0f + gv * (1.0f - sig))));
    detail::store8(dup, dhv * (gv * sig));
  };
  for_each_lanes(n, [&](i64 i) {
    if (i >= 0) return lanes(g + i, u + i, dh + i, dg + i, du + i);
    float gp[kLanes] = {}, up[kLanes] = {}, dhp[kLanes] = {}, dgp[kLanes], dup[kLanes];
    std::copy(g + tail, g + n, gp);
    std::copy(u + tail, u + n, up);
    std::copy(dh + tail, dh + n, dhp);
    lanes(gp, up, dhp, dgp, dup);
    std::copy(dgp, dgp + (n - tail), dg + tail);
    std::copy(dup, dup + (n - tail), du + tail);
  });
}

void add(const float* a, const float* b, float* y, i64 n) {
#pragma omp parallel for simd schedule(static)
  for (i64 i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace tandem::kernels::cpu
