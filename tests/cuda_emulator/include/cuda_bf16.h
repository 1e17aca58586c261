// The CUDA emulator's bfloat16: the storage type and the conversions tandem's kernels use.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b.__x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return __nv_bfloat16{s}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
// Round to nearest even; CUDA writes every NaN as 0x7FFF.
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return __nv_bfloat16{0x7FFF};
  return __nv_bfloat16{static_cast<unsigned short>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16)};
}
