// Which reference's AdamW element update the kernels repeat: shared by the Backend interface and
// the CPU and CUDA kernels (plain C++, so nvcc compiles it too).
#pragma once

#include <cstdint>

namespace tandem::kernels {

// Whose operations an AdamW element update repeats, in fp32, one rounding each:
//   torch_adamw        torch.optim.AdamW(foreach=False): m = lerp(m, g, 1 - beta1),
//                      v = v * beta2 + ((1 - beta2) * g) * g (addcmul_: the add fused),
//                      p = p * decay + (-step_size * m) / denom;
//   olmo_core_foreach  OLMo-core's SkipStepAdamW(foreach=True) (foreach_adamw_step):
//                      m = m * beta1 + g * (1 - beta1), v = v * beta2 + (g * g) * (1 - beta2),
//                      p = p * decay + (m / denom) * -step_size;
//   olmo_core_single   OLMo-core's SkipStepAdamW(foreach=False) (adamw_step): m = lerp(m, g,
//                      1 - beta1), v = v * beta2 + (g * g) * (1 - beta2) as one fused
//                      multiply-add (add_ with alpha), p = p * decay + -step_size * (m / denom).
// torch's lerp(m, g, w) is m + w * (g - m) for w < 0.5, else g - (g - m) * (1 - w), each one
// fused multiply-add. All: denom = sqrt(v) / sqrt(bias_correction2) + eps. optim::adamw_scalars
// forms the scalars as each reference does (see optim/adamw.h).
enum class AdamWArithmetic : std::uint8_t { torch_adamw, olmo_core_foreach, olmo_core_single };

}  // namespace tandem::kernels
