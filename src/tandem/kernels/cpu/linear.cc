// Linear layer without bias, as two or three gemm calls.
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

void linear_forward(const float* x, const float* w, float* y, i64 T, i64 in, i64 out) {
  gemm(false, true, T, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, i64 T,
                     i64 in, i64 out, bool accumulate_dx) {
  if (dx != nullptr) {
    gemm(false, false, T, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
  }
  if (dw != nullptr) {
    gemm(true, false, out, in, T, 1.0f, dy, out, x, in, 1.0f, dw, in);
  }
}

}  // namespace tandem::kernels::cpu
