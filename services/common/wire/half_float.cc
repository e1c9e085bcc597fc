#include "services/common/wire/half_float.h"

#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace strata {
namespace {

#if defined(__x86_64__)
// F16C and AVX, and the operating system saving the AVX registers (CPUID leaf 1: ECX bits 29,
// 28 and 27; XCR0 bits 1 and 2). Read with cpuid itself: clang before 18 does not know "f16c"
// in __builtin_cpu_supports.
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool f16c = (ecx >> 29) & 1u, avx = (ecx >> 28) & 1u, osxsave = (ecx >> 27) & 1u;
    if (!f16c || !avx || !osxsave) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    return (xcr0_low & 6u) == 6u;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) size_t FloatsToHalvesF16c(const float* in, size_t n,
                                                              uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t HalvesToFloatsF16c(const uint16_t* in, size_t n,
                                                              float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}

// Rounds 8 at a time through halves, counting the finite values that became infinite.
__attribute__((target("avx,f16c"))) size_t RoundToHalvesF16c(float* values, size_t n,
                                                             size_t* overflowed) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 infinity = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(values + i);
    const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    const __m256 was_finite = _mm256_cmp_ps(_mm256_and_ps(v, magnitude), infinity, _CMP_LT_OQ);
    const __m256 now_infinite = _mm256_cmp_ps(_mm256_and_ps(r, magnitude), infinity, _CMP_EQ_OQ);
    *overflowed += static_cast<size_t>(
        __builtin_popcount(_mm256_movemask_ps(_mm256_and_ps(was_finite, now_infinite))));
    _mm256_storeu_ps(values + i, r);
  }
  return i;
}
#endif

}  // namespace

void FloatsToHalves(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = FloatsToHalvesF16c(in, n, out);
#endif
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = HalvesToFloatsF16c(in, n, out);
#endif
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

bool FloatsToFiniteHalves(const float* in, size_t n, uint16_t* out) {
  FloatsToHalves(in, n, out);
  // An all-ones exponent is infinity or NaN. Over the halves: half the bytes of the floats.
  bool finite = true;
  for (size_t i = 0; i < n; ++i) finite &= (out[i] & 0x7c00u) != 0x7c00u;
  return finite;
}

size_t RoundToHalves(float* values, size_t n) {
  size_t overflowed = 0, i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = RoundToHalvesF16c(values, n, &overflowed);
#endif
  for (; i < n; ++i) {
    const float rounded = HalfToFloat(FloatToHalf(values[i]));
    overflowed += std::isinf(rounded) && std::isfinite(values[i]);
    values[i] = rounded;
  }
  return overflowed;
}

}  // namespace strata
