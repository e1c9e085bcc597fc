#include "services/common/ml/sgd.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace strata {

void SgdStep(float* __restrict params, const float* __restrict grads, float* __restrict velocity,
             size_t n, const SgdOptions& o) {
  const float lr = o.lr, m = o.momentum, wd = o.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    const float d = grads[i] + wd * params[i];
    const float v = m * velocity[i] + d;
    velocity[i] = v;
    params[i] -= lr * v;
  }
}

bool SgdStepInto(const float* __restrict params, const float* __restrict grads,
                 const float* __restrict velocity, float* __restrict params_out,
                 float* __restrict velocity_out, size_t n, const SgdOptions& o) {
  const float lr = o.lr, m = o.momentum, wd = o.weight_decay;
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    const float d = grads[i] + wd * params[i];
    const float v = m * velocity[i] + d;
    const float p = params[i] - lr * v;
    velocity_out[i] = v;
    params_out[i] = p;
    non_finite |= NonFinite(p) | NonFinite(v);
  }
  return non_finite == 0;
}

namespace {

// Signed: |x|'s bit pattern fits in 31 bits, and SSE2 has a signed 32-bit compare only.
inline __attribute__((always_inline)) int32_t LargestMagnitudeBits(const float* values, size_t n) {
  int32_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    bits &= 0x7fffffff;  // |x|: non-negative floats order like their bit patterns
    largest = bits > largest ? bits : largest;
  }
  return largest;
}

// The same loop compiled for SSE4.1's signed max and for AVX2's wider one. Chosen at the first
// call rather than by an ifunc (target_clones), which runs before a sanitizer's runtime is up.
__attribute__((target("sse4.1"))) int32_t LargestMagnitudeBitsSse41(const float* values, size_t n) {
  return LargestMagnitudeBits(values, n);
}
__attribute__((target("avx2"))) int32_t LargestMagnitudeBitsAvx2(const float* values, size_t n) {
  return LargestMagnitudeBits(values, n);
}
int32_t LargestMagnitudeBitsPlain(const float* values, size_t n) {
  return LargestMagnitudeBits(values, n);
}

}  // namespace

// Every push is scanned once (docs/benchmarks.md), so it gets the widest integer max the CPU
// has. Integer work: the same answer on every path.
float MaxAbsOrInfinity(const float* values, size_t n) {
  static const auto largest_bits = __builtin_cpu_supports("avx2")     ? LargestMagnitudeBitsAvx2
                                   : __builtin_cpu_supports("sse4.1") ? LargestMagnitudeBitsSse41
                                                                      : LargestMagnitudeBitsPlain;
  const int32_t largest = largest_bits(values, n);
  if (largest >= 0x7f800000) return std::numeric_limits<float>::infinity();
  float out;
  std::memcpy(&out, &largest, sizeof out);
  return out;
}

bool SgdStepCannotOverflow(const SgdOptions& o, double g_bound, double* p_bound, double* v_bound) {
  // |d| <= G + wd P, |v'| <= m V + |d|, |p'| <= P + lr |v'|, in exact arithmetic; float rounding
  // adds a relative 2^-23 per operation, far inside the factor of 4 kept from FLT_MAX.
  const double limit = std::numeric_limits<float>::max() / 4.0;
  const double lr = std::fabs(o.lr), m = std::fabs(o.momentum), wd = std::fabs(o.weight_decay);
  const double v = m * *v_bound + g_bound + wd * *p_bound;
  const double p = *p_bound + lr * v;
  if (!(g_bound < limit && v < limit && p < limit)) return false;
  *p_bound = p;
  *v_bound = v;
  return true;
}

double ScheduledLearningRate(double base_lr, absl::Span<const int32_t> milestones, double gamma,
                             double epoch) {
  double lr = base_lr;
  for (int32_t milestone : milestones) {
    if (epoch >= milestone) lr *= gamma;
  }
  return lr;
}

}  // namespace strata
