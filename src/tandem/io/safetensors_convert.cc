// bf16/f16 <-> f32 conversions. Narrowing rounds to nearest, ties to even; NaN stays NaN (quiet,
// sign and top payload bits kept); overflow goes to infinity; f16 subnormals are exact.
#include <bit>
#include <cstring>

#include "tandem/core/bfloat16.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/safetensors_detail.h"

namespace tandem::io {

float bf16_to_f32(std::uint16_t v) { return core::bf16_bits_to_f32(v); }

std::uint16_t f32_to_bf16(float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  // Truncating a NaN could leave an all-zero mantissa (infinity); force the quiet bit.
  if (core::is_nan_bits(bits)) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return core::bf16_round_bits(bits);
}

float f16_to_f32(std::uint16_t v) {
  std::uint32_t sign = std::uint32_t{v & 0x8000u} << 16;
  std::uint32_t exponent = (v >> 10) & 0x1Fu;
  std::uint32_t mantissa = v & 0x3FFu;
  if (exponent == 0x1F) {  // infinity or NaN, payload kept
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent != 0) {  // normal: rebias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  // Zero or subnormal: mantissa x 2^-24, exact in fp32.
  float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
}

std::uint16_t f32_to_f16(float v) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: quiet, top 9 payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity
  if (magnitude >= 0x38800000u) {                       // f16 normal range (>= 2^-14)
    std::uint32_t h = (magnitude - 0x38000000u) >> 13;  // rebias 127 -> 15, drop 13 bits
    std::uint32_t rest = magnitude & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // f16 subnormal range: value / 2^-24 = significand x 2^(exponent - 126).
  std::uint32_t exponent = magnitude >> 23;
  std::uint32_t shift = 126u - exponent;  // >= 14 here
  if (shift > 24u) return sign;           // below 2^-25: rounds to zero
  std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  std::uint32_t q = significand >> shift;
  std::uint32_t rest = significand & ((1u << shift) - 1u);
  std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

namespace safetensors_detail {

void convert_to_f32(DType dtype, const std::uint8_t* src, std::size_t count, float* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, src, count * sizeof(float));
    return;
  }
  auto n = static_cast<std::int64_t>(count);
  bool widen_bf16 = dtype == DType::kBF16;
  // Large tensors (embeddings) are worth threads; element-wise, so any split is deterministic.
#pragma omp parallel for schedule(static) if (n > (1 << 20))
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t v;
    std::memcpy(&v, src + 2 * i, sizeof(v));
    out[i] = widen_bf16 ? bf16_to_f32(v) : f16_to_f32(v);
  }
}

}  // namespace safetensors_detail
}  // namespace tandem::io
