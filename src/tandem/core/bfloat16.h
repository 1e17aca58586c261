// bfloat16 bits: the upper 16 bits of an IEEE float. One rounding rule for every narrowing in
// tandem (file conversions in io/, the bf16 compute path in kernels/); callers choose what a NaN
// becomes.
#pragma once

#include <bit>
#include <cstdint>

namespace tandem::core {

inline bool is_nan_bits(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

// Round to nearest, ties to even, of a float that is not a NaN. Adding 0x7FFF plus the lowest kept
// bit rounds half to even; a carry into the exponent is the correct result (up to infinity).
inline std::uint16_t bf16_round_bits(std::uint32_t bits) {
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

// Exact.
inline float bf16_bits_to_f32(std::uint16_t v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16);
}

}  // namespace tandem::core
