// SGD with momentum and weight decay on flat float buffers: the one optimizer of Strata, used by
// the single-node trainer, by all-reduce workers and by the parameter servers, so that the modes
// are comparable step for step. Same arithmetic as torch.optim.SGD (dampening 0, no Nesterov):
//   d = g + weight_decay * p;  v = momentum * v + d;  p -= lr * v
// (with v starting at zero, the first step gives v = d, as PyTorch does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <absl/types/span.h>

namespace strata {

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

void SgdStep(float* params, const float* grads, float* velocity, size_t n,
             const SgdOptions& options);

// The same step written to `params_out` / `velocity_out` (which must not alias the inputs), so
// the caller can refuse it and keep its model: returns false if any resulting value is not
// finite. Finite inputs can still overflow (a gradient near FLT_MAX times a large rate).
bool SgdStepInto(const float* params, const float* grads, const float* velocity, float* params_out,
                 float* velocity_out, size_t n, const SgdOptions& options);

// 1 if `x` is an infinity or a NaN (all exponent bits set), else 0. An integer test, so a loop
// that ORs it over a buffer vectorises; a float sum or std::isfinite with an early exit does not
// (SgdStepInto runs it over every value it writes).
inline uint32_t NonFinite(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x7f800000u) == 0x7f800000u;
}

// The largest |x| of the `n` values (0 for none), or infinity if any is an infinity or a NaN.
// One pass over integer bit patterns, which order like the magnitudes and vectorise.
float MaxAbsOrInfinity(const float* values, size_t n);

// Whether a step with these options can overflow, given upper bounds on |p|, |v| and |g| over
// the buffers; if not, *p_bound and *v_bound become bounds on |p| and |v| after it. A step that
// cannot overflow leaves finite inputs finite, so it may run in place (SgdStep) where otherwise
// only SgdStepInto, which checks its results, is safe.
bool SgdStepCannotOverflow(const SgdOptions& options, double g_bound, double* p_bound,
                           double* v_bound);

// Learning rates a request may carry. Far above any rate SGD trains with (the large-batch
// recipes stay below ~50), low enough that a typo or a hostile 1e300 (inf once cast to float)
// is refused at the boundary rather than by the finiteness check after the arithmetic.
inline constexpr double kMaxLearningRate = 1000.0;

// Step schedule (training.lr_schedule): lr * gamma^(number of milestones <= epoch).
double ScheduledLearningRate(double base_lr, absl::Span<const int32_t> milestones, double gamma,
                             double epoch);

}  // namespace strata
