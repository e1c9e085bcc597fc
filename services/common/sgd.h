// SGD with momentum and weight decay on flat float buffers: the one optimizer of Strata, used by
// the single-node trainer, by all-reduce workers and by the parameter servers, so that the modes
// are comparable step for step. Same arithmetic as torch.optim.SGD (dampening 0, no Nesterov):
//   d = g + weight_decay * p;  v = momentum * v + d;  p -= lr * v
// (with v starting at zero, the first step gives v = d, as PyTorch does).
#pragma once

#include <cstddef>
#include <vector>

#include "services/common/job_spec.h"

namespace strata {

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

void SgdStep(float* params, const float* grads, float* velocity, size_t n, const SgdOptions& options);

// Step schedule: lr * gamma^(number of milestones <= epoch).
double ScheduledLearningRate(double base_lr, const LrScheduleSpec& schedule, double epoch);

}  // namespace strata
