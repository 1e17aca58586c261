// bfloat16 on the CPU: storage as the upper 16 bits of an IEEE float, conversions with
// round-to-nearest-even giving the same bits as torch's `.to(torch.bfloat16)` on the CPU (every NaN
// becomes 0xFFFF, as ATen's vectorised conversion writes it; its scalar c10 helper would write
// 0x7FC0, but tensors go through the vector path), and bf16 GEMMs with fp32
// accumulation (oneDNN's bf16 matmul where the CPU has native bf16 instructions, else an exact
// conversion to fp32 and the fp32 GEMM: a product of two bf16 values is exact in fp32).
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "tandem/core/bfloat16.h"

namespace tandem::kernels::cpu {

using bf16 = std::uint16_t;

inline bf16 f32_to_bf16(float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  return core::is_nan_bits(bits) ? bf16{0xFFFF} : core::bf16_round_bits(bits);
}

inline float bf16_to_f32(bf16 v) { return core::bf16_bits_to_f32(v); }

// n values, in parallel.
void to_f32(const bf16* src, float* dst, std::int64_t n);
void to_bf16(const float* src, bf16* dst, std::int64_t n);
// Rounds fp32 values to the nearest bf16 in place (dst stays fp32).
void round_to_bf16(float* x, std::int64_t n);

// Which bf16 GEMM runs: "onednn" (native bf16 instructions: avx512_bf16 or AMX) or "fp32"
// (convert exactly, then the fp32 GEMM). TANDEM_CPU_BF16_GEMM=fp32|onednn forces one.
enum class Bf16GemmPath { kOneDnn, kFp32 };
Bf16GemmPath bf16_gemm_path();
std::string bf16_gemm_path_name();

// C[M,N] (fp32) = op(A) * op(B) + beta * C with A, B bf16, fp32 accumulation. Row-major.
void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta,
               float* C, std::int64_t ldc);

}  // namespace tandem::kernels::cpu
