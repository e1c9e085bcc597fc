#include "services/common/ml/sgd.h"

#include <cmath>

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

bool AllFinite(const float* values, size_t n) {
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) non_finite |= NonFinite(values[i]);
  return non_finite == 0;
}

double ScheduledLearningRate(double base_lr, const LrScheduleSpec& schedule, double epoch) {
  double lr = base_lr;
  for (int milestone : schedule.milestones) {
    if (epoch >= milestone) lr *= schedule.gamma;
  }
  return lr;
}

}  // namespace strata
