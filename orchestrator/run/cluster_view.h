// What the orchestrator knows of the training cluster at one moment: the workers' last answered
// statuses and the training losses they reported per epoch, plus the plan's figures. The cluster
// arithmetic every controller needs (global epoch, total steps, seconds per step, the switch
// margin) is here as pure functions of that snapshot, so it is unit-tested without a cluster.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "strata/v1/worker.pb.h"

namespace strata {

struct ClusterView {
  std::vector<v1::WorkerStatus> workers;  // by rank; default until a worker first answers
  // Per rank: the training loss each epoch ended with (epoch number -> loss).
  std::vector<std::map<int64_t, double>> loss_by_epoch;
  int64_t planned_steps_per_epoch = 0;  // the orchestrator's own figure, until a worker reports
  int worker_batch = 1;                 // examples per worker step
  int epochs = 0;                       // planned

  // The workers' steps per epoch once one reported it, else the plan's.
  int64_t StepsPerEpoch() const;
  // All workers' steps together.
  int64_t TotalSteps() const;
  int64_t MaxStep() const;
  // The last step training runs: StepsPerEpoch() * epochs.
  int64_t LastStep() const;
  // Global epochs: all workers' steps over one epoch's worth of steps of the whole cluster. In
  // all-reduce every worker has the same step; after the switch fast workers count for more.
  // Whole epochs, capped at the plan.
  int64_t GlobalEpoch() const;
  double GlobalEpochFraction() const;
  // Every worker finished training without an error.
  bool AllFinished() const;
  double SamplesPerSecond() const;
  // Seconds per step of the slowest worker (0.1 before anyone reported a rate).
  double StepSeconds() const;
  // Steps ahead of the fastest worker for the switch step, so that every worker holds the
  // request before it gets there (see the definition for the figures).
  int64_t SwitchMargin() const;
  // The mean over workers of the training loss of `epoch`; NaN if none reported it.
  double TrainLossOf(int64_t epoch) const;

  // Takes a worker's answer: its status and, once it has stepped, its epoch's training loss.
  void Record(size_t rank, const v1::WorkerStatus& status);
};

// Each worker's samples/s since an earlier look at the cluster `seconds` ago, when its steps
// were `earlier_steps` (by rank): the steps it made since, times the batch, over the time. A
// worker without such an interval (no earlier look, no time passed, a count that went back)
// gets the rate it reports itself, which covers its current phase.
std::vector<double> WorkerSamplesPerSecondSince(const ClusterView& view,
                                                const std::vector<int64_t>& earlier_steps,
                                                double seconds);

}  // namespace strata
