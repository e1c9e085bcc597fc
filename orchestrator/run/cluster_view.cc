#include "orchestrator/run/cluster_view.h"

#include <algorithm>
#include <cmath>

namespace strata {

int64_t ClusterView::StepsPerEpoch() const {
  for (const auto& s : workers) {
    if (s.steps_per_epoch() > 0) return s.steps_per_epoch();
  }
  return planned_steps_per_epoch;
}

int64_t ClusterView::TotalSteps() const {
  int64_t total = 0;
  for (const auto& s : workers) total += s.step();
  return total;
}

int64_t ClusterView::MaxStep() const {
  int64_t max_step = 0;
  for (const auto& s : workers) max_step = std::max(max_step, s.step());
  return max_step;
}

int64_t ClusterView::LastStep() const { return StepsPerEpoch() * epochs; }

int64_t ClusterView::GlobalEpoch() const {
  const int64_t per_epoch = StepsPerEpoch() * static_cast<int64_t>(workers.size());
  if (per_epoch <= 0) return 0;
  return std::min<int64_t>(TotalSteps() / per_epoch, epochs);
}

double ClusterView::GlobalEpochFraction() const {
  const int64_t per_epoch = StepsPerEpoch() * static_cast<int64_t>(workers.size());
  return per_epoch > 0 ? static_cast<double>(TotalSteps()) / per_epoch : 0;
}

bool ClusterView::AllFinished() const {
  for (const auto& s : workers) {
    // A worker that stopped on an error has not finished training: the supervisor fails the run
    // once the grace for a peer's exit has passed, and meanwhile nothing may call it a success.
    if (!s.finished() || !s.error().empty()) return false;
  }
  return !workers.empty();
}

double ClusterView::SamplesPerSecond() const {
  double sum = 0;
  for (const auto& s : workers) sum += s.samples_per_s();
  return sum;
}

double ClusterView::StepSeconds() const {
  double slowest = 0;
  for (const auto& s : workers) {
    if (s.samples_per_s() > 0)
      slowest = slowest == 0 ? s.samples_per_s() : std::min(slowest, s.samples_per_s());
  }
  return slowest > 0 ? worker_batch / slowest : 0.1;
}

// A request that arrives late only delays the switch: the ring votes on the step. A loopback RPC
// takes milliseconds; half a second of steps (at least 3) covers a loaded machine. The workers
// keep training meanwhile, so the margin is not part of the handover.
int64_t ClusterView::SwitchMargin() const {
  return std::max<int64_t>(3, static_cast<int64_t>(std::ceil(0.5 / StepSeconds())));
}

double ClusterView::TrainLossOf(int64_t epoch) const {
  double sum = 0;
  int n = 0;
  for (const auto& by_epoch : loss_by_epoch) {
    if (auto it = by_epoch.find(epoch); it != by_epoch.end()) sum += it->second, ++n;
  }
  return n > 0 ? sum / n : std::nan("");
}

void ClusterView::Record(size_t rank, const v1::WorkerStatus& status) {
  if (workers.size() <= rank) workers.resize(rank + 1);
  if (loss_by_epoch.size() <= rank) loss_by_epoch.resize(rank + 1);
  workers[rank] = status;
  if (status.steps_per_epoch() > 0 && status.step() > 0) {
    const int64_t epoch = (status.step() + status.steps_per_epoch() - 1) / status.steps_per_epoch();
    loss_by_epoch[rank][epoch] = status.train_loss();
  }
}

std::vector<double> WorkerSamplesPerSecondSince(const ClusterView& view,
                                                const std::vector<int64_t>& earlier_steps,
                                                double seconds) {
  std::vector<double> rates;
  for (size_t r = 0; r < view.workers.size(); ++r) {
    const v1::WorkerStatus& w = view.workers[r];
    const bool interval = r < earlier_steps.size() && seconds > 0 && w.step() >= earlier_steps[r];
    rates.push_back(interval ? static_cast<double>(w.step() - earlier_steps[r]) *
                                   view.worker_batch / seconds
                             : w.samples_per_s());
  }
  return rates;
}

}  // namespace strata
