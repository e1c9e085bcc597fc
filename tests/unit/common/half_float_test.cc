// The half-precision conversions of the ring's 16-bit wire (services/common/wire/half_float.h)
// against the compiler's own _Float16 (GCC's binary16, which rounds to nearest, ties to even):
// every one of the 65,536 halves to float, and floats to half at every boundary that matters
// (ties, subnormals, the largest finite half, infinity, NaN) and at a million random values.
// And the bulk conversions (F16C where the processor has it) against the scalar ones. (Seen to
// fail: with ties rounded up instead of to even, 1 + 2^-11 became 0x3c01 instead of 0x3c00.)
#include "services/common/wire/half_float.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

#if defined(__FLT16_MAX__)
uint16_t Reference(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

TEST(HalfFloat, EveryHalfConvertsToTheFloatOfItsValue) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    _Float16 reference;
    std::memcpy(&reference, &h, sizeof h);
    const float want = static_cast<float>(reference), got = HalfToFloat(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << std::hex << bits << " " << got;
      EXPECT_EQ(FloatToHalf(got), h) << std::hex << bits;  // and back, exactly
    }
  }
}

TEST(HalfFloat, FloatsRoundToTheNearestHalfTiesToEven) {
  const float cases[] = {0.0f,
                         -0.0f,
                         1.0f,
                         1.0f + std::ldexp(1.0f, -11),      // a tie: stays even
                         1.0f + 3 * std::ldexp(1.0f, -11),  // a tie: rounds up
                         65504.0f,
                         65519.0f,
                         65520.0f,
                         1e6f,
                         -1e6f,
                         std::ldexp(1.0f, -14),
                         std::ldexp(1.0f, -24),
                         std::ldexp(1.0f, -25),
                         std::ldexp(3.0f, -26),
                         std::ldexp(1.0f, -26),
                         6.1e-5f,
                         1e-30f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::denorm_min(),
                         1.0f / 3};
  for (float f : cases) EXPECT_EQ(FloatToHalf(f), Reference(f)) << f;
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = any(random);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), Reference(f)) << std::hex << bits;
  }
}
#endif

// The bulk conversions (F16C where the processor has it) give the scalar code's bits, whatever
// the length (the 8-wide loop and the tail), and count the values that overflowed.
TEST(HalfFloat, TheBulkConversionsAgreeWithTheScalarOnes) {
  std::mt19937 random(11);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> floats(100003);
  for (float& f : floats) {
    const uint32_t bits = any(random);
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) f = 1.5f;  // NaN payloads may differ; NaN itself is checked below
  }
  floats[5] = std::numeric_limits<float>::infinity();
  floats[6] = 1e6f;
  floats[7] = std::ldexp(1.0f, -20);
  std::vector<uint16_t> halves(floats.size());
  FloatsToHalves(floats.data(), floats.size(), halves.data());
  size_t finite_to_infinite = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(halves[i], FloatToHalf(floats[i])) << i << " " << floats[i];
    finite_to_infinite += std::isfinite(floats[i]) && (halves[i] & 0x7fffu) == 0x7c00u;
  }
  std::vector<float> back(floats.size());
  HalvesToFloats(halves.data(), halves.size(), back.data());
  for (size_t i = 0; i < floats.size(); ++i) {
    const float want = HalfToFloat(halves[i]);
    ASSERT_EQ(std::memcmp(&back[i], &want, sizeof want), 0) << i;
  }
  std::vector<float> rounded = floats;
  EXPECT_EQ(RoundToHalves(rounded.data(), rounded.size()), finite_to_infinite);
  ASSERT_EQ(std::memcmp(rounded.data(), back.data(), back.size() * sizeof(float)), 0);
  float nan[9];
  for (float& f : nan) f = std::numeric_limits<float>::quiet_NaN();
  uint16_t nan_halves[9];
  FloatsToHalves(nan, 9, nan_halves);
  for (uint16_t h : nan_halves) EXPECT_TRUE(std::isnan(HalfToFloat(h)));
}

TEST(HalfFloat, RoundingTwiceChangesNothing) {
  float values[] = {0.1f, -3.14159f, 1e-7f, 70000.0f};
  RoundToHalves(values, 4);
  float again[4];
  std::memcpy(again, values, sizeof values);
  RoundToHalves(again, 4);
  EXPECT_EQ(std::memcmp(values, again, sizeof values), 0);
  EXPECT_EQ(values[3], std::numeric_limits<float>::infinity());
}

// What a 16-bit push/pull asks before it sends halves: up to 65,519 (which rounds to 65,504)
// every half is finite; beyond it, or a NaN anywhere, not. 20 values, so that both the F16C
// blocks and the scalar tail hold the culprit in turn.
TEST(HalfFloat, FiniteHalvesAreToldFromOverflowAndNan) {
  std::vector<float> values(20, 0.5f);
  std::vector<uint16_t> halves(values.size());
  values[17] = 65519.0f;
  EXPECT_TRUE(FloatsToFiniteHalves(values.data(), values.size(), halves.data()));
  EXPECT_EQ(halves[17], 0x7bffu);
  for (size_t at : {size_t{3}, size_t{17}}) {
    std::vector<float> bad = values;
    bad[at] = 65520.0f;
    EXPECT_FALSE(FloatsToFiniteHalves(bad.data(), bad.size(), halves.data())) << at;
    bad[at] = std::nanf("");
    EXPECT_FALSE(FloatsToFiniteHalves(bad.data(), bad.size(), halves.data())) << at;
  }
}

}  // namespace
}  // namespace strata
