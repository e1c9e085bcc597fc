// IEEE 754 half precision (binary16) for data on the wire: 16-bit floats halve what a ring
// all-reduce sends (strategy.ring_compression: fp16). Conversions are exact where they can be:
// a half converts to the float of the same value, and a float converts to the nearest half, ties
// to the even one, beyond 65,504 to infinity, NaN to NaN. Plain integer code with no dependence
// on compiler support for a 16-bit float type (the fuzz build's clang has none). The bulk
// conversions below use the processor's own (F16C, 8 values an instruction) where it has them:
// the scalar code costs more than the bytes it saves on a slow host (docs/benchmarks.md, "16-bit
// floats on the ring").
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata {

inline uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN stays a (quiet) NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // 65,520 and above round to infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14 a half is subnormal, in steps of 2^-24: scale by 2^24 (exact) and round to the
    // nearest integer, ties to even (the default rounding mode). 1,024 steps make the smallest
    // normal half, whose bits are 0x0400 too.
    const float steps = std::fabs(value) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(steps));
  }
  // A normal half: the exponent re-biased from 127 to 15, the 10 high bits of the mantissa kept
  // and the 13 dropped rounded to nearest, ties to even. A carry out of the mantissa moves into
  // the exponent, which is the right result.
  uint32_t half = (magnitude >> 13) - (uint32_t{127 - 15} << 10);
  const uint32_t dropped = magnitude & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u) != 0)) ++half;
  return sign | static_cast<uint16_t>(half);
}

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in a float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  uint32_t bits = sign | (mantissa << 13);
  bits |= exponent == 31 ? 0x7f800000u : (exponent + (127 - 15)) << 23;  // infinity or NaN
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// n values each way, with F16C where the processor has it (the same results: round to
// nearest, ties to even); `out` must not overlap `in`.
void FloatsToHalves(const float* in, size_t n, uint16_t* out);
void HalvesToFloats(const uint16_t* in, size_t n, float* out);
// FloatsToHalves, then whether every half came out finite (none beyond 65,504 or not a number):
// what a 16-bit push/pull checks before it sends them (else it sends the floats).
bool FloatsToFiniteHalves(const float* in, size_t n, uint16_t* out);

// Each value replaced by the float of its nearest half: what a rank sends in 16 bits, so that it
// keeps exactly what its peers receive. Returns how many finite values became infinite (beyond
// 65,504).
size_t RoundToHalves(float* values, size_t n);

}  // namespace strata
