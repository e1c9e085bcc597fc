// What a worker shows Prometheus (docs/user-guide.md, "Watching a job", has the table): samples
// and steps, the step time, the phase and its switches, the time of the last step (for an alert
// on a stuck job), the bytes its ring sends and the push/pull traffic with the servers. Every
// series carries the worker's rank. The instruments are prometheus-cpp's: counters and gauges are
// atomics, a histogram takes its own short lock; the training thread calls them once per step.
#pragma once

#include <cstdint>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "strata/v1/worker.pb.h"

namespace strata {

class WorkerMetrics {
 public:
  // `ring_bytes_per_step`: what one all-reduce of the gradients sends from each rank, 2 (n - 1) / n
  // of their bytes for n workers (RingAllReduce's reduce-scatter then all-gather).
  WorkerMetrics(prometheus::Registry& registry, int rank, double ring_bytes_per_step);

  // One training step done: `examples` samples in `seconds` (gradients and synchronisation).
  // Called by the training thread only, as Phase is.
  void StepDone(int64_t examples, double seconds);
  // The synchroniser the worker trains with from now on; `switched` counts a change of phase.
  void Phase(v1::SyncMode mode, bool switched);
  // One exchange with the parameter servers (any thread): what went out, what came back, how long
  // it took.
  void PushPull(double pushed_bytes, double pulled_bytes, double seconds);

 private:
  prometheus::Counter& samples_;
  prometheus::Counter& steps_;
  prometheus::Histogram& step_seconds_;
  prometheus::Gauge& phase_;
  prometheus::Counter& switches_;
  prometheus::Gauge& last_step_timestamp_;
  prometheus::Counter& ring_bytes_sent_;
  prometheus::Counter& pushed_bytes_;
  prometheus::Counter& pulled_bytes_;
  prometheus::Histogram& push_pull_seconds_;
  const double ring_bytes_per_step_;
  bool in_ring_ = false;
};

}  // namespace strata
