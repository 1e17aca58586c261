// bf16/f16 <-> f32 conversions: exhaustive round trips, hand-picked edge cases, and agreement with
// torch's conversions recorded in tests/fixtures/io/conversions.safetensors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "safetensors_test_util.h"
#include "tandem/io/safetensors.h"

namespace tandem {
namespace {

std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }
float from_bits(std::uint32_t v) { return std::bit_cast<float>(v); }

std::vector<std::uint16_t> as_u16(std::span<const std::uint8_t> raw) {
  std::vector<std::uint16_t> out(raw.size() / 2);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}
std::vector<std::uint32_t> as_u32(std::span<const std::uint8_t> raw) {
  std::vector<std::uint32_t> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

TEST(Conversions, EveryBf16RoundTripsThroughF32) {
  for (std::uint32_t v = 0; v <= 0xFFFF; ++v) {
    auto h = static_cast<std::uint16_t>(v);
    float f = io::bf16_to_f32(h);
    EXPECT_EQ(bits_of(f), v << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(io::bf16_to_f32(io::f32_to_bf16(f)))) << std::hex << v;
    } else {
      ASSERT_EQ(io::f32_to_bf16(f), h) << std::hex << v;
    }
  }
}

TEST(Conversions, EveryF16RoundTripsThroughF32) {
  int subnormals = 0;
  for (std::uint32_t v = 0; v <= 0xFFFF; ++v) {
    auto h = static_cast<std::uint16_t>(v);
    float f = io::f16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_EQ(v & 0x7C00u, 0x7C00u);
      std::uint16_t back = io::f32_to_f16(f);
      EXPECT_TRUE(std::isnan(io::f16_to_f32(back))) << std::hex << v;
      EXPECT_EQ(back & 0x8000u, v & 0x8000u) << "NaN sign kept";
      continue;
    }
    if ((v & 0x7C00u) == 0 && (v & 0x3FFu) != 0) {
      ++subnormals;
      EXPECT_EQ(std::fabs(f), static_cast<float>(v & 0x3FFu) * 0x1p-24f);
    }
    ASSERT_EQ(io::f32_to_f16(f), h) << std::hex << v;
  }
  EXPECT_EQ(subnormals, 2 * 1023);
}

TEST(Conversions, EdgeCasesByHand) {
  // f16: largest finite, overflow threshold (ties to even -> infinity), subnormal ties.
  EXPECT_EQ(io::f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(io::f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(io::f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(io::f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(io::f32_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(io::f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(io::f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and 2^-24 -> even (0)
  EXPECT_EQ(io::f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(io::f32_to_f16(3 * 0x1p-25f), 0x0002);                    // 1.5 units -> 2
  EXPECT_EQ(io::f32_to_f16(5 * 0x1p-25f), 0x0002);                    // 2.5 units -> 2
  EXPECT_EQ(io::f32_to_f16(std::nextafter(0x1p-14f, 0.0f)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(io::f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(io::f32_to_f16(1.0f + 0x1p-11f), 0x3C00);      // tie -> even
  EXPECT_EQ(io::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(io::f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(io::f16_to_f32(0x8400), -0x1p-14f);
  EXPECT_EQ(io::f16_to_f32(0x7C00), INFINITY);
  // bf16.
  EXPECT_EQ(io::f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);         // tie -> even
  EXPECT_EQ(io::f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);     // tie -> even (up)
  EXPECT_EQ(io::f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // max float rounds to infinity
  EXPECT_EQ(io::f32_to_bf16(from_bits(0x00000001)), 0x0000);
  EXPECT_EQ(io::f32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(io::f32_to_bf16(from_bits(0x00018000)), 0x0002);
  // NaNs stay NaN even when the payload sits only in the dropped bits.
  EXPECT_TRUE(std::isnan(io::bf16_to_f32(io::f32_to_bf16(from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(io::f16_to_f32(io::f32_to_f16(from_bits(0xFF800001)))));
  EXPECT_EQ(io::f32_to_bf16(from_bits(0xFF800001)) & 0x8000, 0x8000);
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversion (hardware or libgcc, both round to nearest even) as an
// independent reference over a sweep of all f32 bit patterns.
TEST(Conversions, F32ToF16MatchesCompilerFloat16OnASweep) {
  std::uint64_t checked = 0;
  for (std::uint64_t v = 0; v <= 0xFFFFFFFFull; v += 997) {
    float f = from_bits(static_cast<std::uint32_t>(v));
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    std::uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(io::f32_to_f16(f), expected) << std::hex << v;
    ++checked;
  }
  EXPECT_GT(checked, 4'000'000u);
}
#endif

TEST(Conversions, MatchTorchOnFixture) {
  io::SafetensorsFile file(testing::io_fixture("conversions.safetensors"));
  std::vector<std::uint32_t> src = as_u32(file.raw("conv_src"));
  std::vector<std::uint16_t> torch_bf16 = as_u16(file.raw("conv_src_to_bf16"));
  std::vector<std::uint16_t> torch_f16 = as_u16(file.raw("conv_src_to_f16"));
  ASSERT_EQ(src.size(), torch_bf16.size());
  ASSERT_EQ(src.size(), torch_f16.size());
  ASSERT_GT(src.size(), 2000u);
  int nans = 0;
  for (std::size_t i = 0; i < src.size(); ++i) {
    float f = from_bits(src[i]);
    if (std::isnan(f)) {  // torch canonicalises NaN bits; only NaN-ness is comparable
      ++nans;
      EXPECT_TRUE(std::isnan(io::bf16_to_f32(torch_bf16[i])));
      EXPECT_TRUE(std::isnan(io::bf16_to_f32(io::f32_to_bf16(f))));
      EXPECT_TRUE(std::isnan(io::f16_to_f32(io::f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(io::f32_to_bf16(f), torch_bf16[i]) << "bf16 of 0x" << std::hex << src[i];
    EXPECT_EQ(io::f32_to_f16(f), torch_f16[i]) << "f16 of 0x" << std::hex << src[i];
  }
  EXPECT_GT(nans, 3);

  for (const char* kind : {"bf16", "f16"}) {
    std::string name = std::string("widen_") + kind;
    std::vector<std::uint16_t> narrow = as_u16(file.raw(name));
    std::vector<std::uint32_t> torch_wide = as_u32(file.raw(name + "_f32"));
    std::vector<float> ours = file.read_f32(name);  // the reader's bulk path
    ASSERT_EQ(narrow.size(), torch_wide.size());
    ASSERT_EQ(ours.size(), narrow.size());
    for (std::size_t i = 0; i < narrow.size(); ++i) {
      float single = name == "widen_bf16" ? io::bf16_to_f32(narrow[i]) : io::f16_to_f32(narrow[i]);
      EXPECT_EQ(bits_of(single), bits_of(ours[i]));
      if (std::isnan(from_bits(torch_wide[i]))) {
        EXPECT_TRUE(std::isnan(single)) << kind << " 0x" << std::hex << narrow[i];
      } else {
        EXPECT_EQ(bits_of(single), torch_wide[i]) << kind << " 0x" << std::hex << narrow[i];
      }
    }
  }
}

}  // namespace
}  // namespace tandem
