#include "services/worker/worker_metrics.h"

#include <chrono>
#include <string>

#include "services/common/metrics/metrics_endpoint.h"

namespace strata {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Labels;

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry, int rank, double ring_bytes_per_step)
    : samples_(BuildCounter()
                   .Name("strata_worker_samples_total")
                   .Help("Training examples this worker has computed gradients on")
                   .Register(registry)
                   .Add(Labels{{"rank", std::to_string(rank)}})),
      steps_(BuildCounter()
                 .Name("strata_worker_steps_total")
                 .Help("Training steps this worker has completed")
                 .Register(registry)
                 .Add(Labels{{"rank", std::to_string(rank)}})),
      // 1 ms to about 33 s: an MLP step on this machine takes milliseconds, a ResNet's on a
      // loaded core seconds.
      step_seconds_(
          BuildHistogram()
              .Name("strata_worker_step_seconds")
              .Help("Time of one training step: gradients and synchronisation")
              .Register(registry)
              .Add(Labels{{"rank", std::to_string(rank)}}, ExponentialBuckets(0.001, 2, 16))),
      phase_(BuildGauge()
                 .Name("strata_worker_phase")
                 .Help("How the worker synchronises: 0 ring all-reduce, 1 parameter servers, "
                       "-1 not training yet")
                 .Register(registry)
                 .Add(Labels{{"rank", std::to_string(rank)}})),
      switches_(BuildCounter()
                    .Name("strata_worker_switches_total")
                    .Help("Changes from the ring to the parameter servers (the live switch or "
                          "the fall-back from a broken ring)")
                    .Register(registry)
                    .Add(Labels{{"rank", std::to_string(rank)}})),
      last_step_timestamp_(BuildGauge()
                               .Name("strata_worker_last_step_timestamp_seconds")
                               .Help("Unix time of the last completed step (0: none yet)")
                               .Register(registry)
                               .Add(Labels{{"rank", std::to_string(rank)}})),
      ring_bytes_sent_(
          BuildCounter()
              .Name("strata_worker_ring_sent_bytes_total")
              .Help("Bytes of gradients this worker sent to its ring neighbour in all-reduce steps")
              .Register(registry)
              .Add(Labels{{"rank", std::to_string(rank)}})),
      pushed_bytes_(BuildCounter()
                        .Name("strata_worker_push_bytes_total")
                        .Help("Bytes of gradients and buffers pushed to the parameter servers")
                        .Register(registry)
                        .Add(Labels{{"rank", std::to_string(rank)}})),
      pulled_bytes_(BuildCounter()
                        .Name("strata_worker_pull_bytes_total")
                        .Help("Bytes of parameters and buffers pulled from the parameter servers")
                        .Register(registry)
                        .Add(Labels{{"rank", std::to_string(rank)}})),
      // 0.1 ms (shared memory, a small model) to about 3 s.
      push_pull_seconds_(
          BuildHistogram()
              .Name("strata_worker_push_pull_seconds")
              .Help("Round trip of one push/pull exchange with every server")
              .Register(registry)
              .Add(Labels{{"rank", std::to_string(rank)}}, ExponentialBuckets(0.0001, 2, 15))),
      ring_bytes_per_step_(ring_bytes_per_step) {
  phase_.Set(-1);
}

void WorkerMetrics::StepDone(int64_t examples, double seconds) {
  samples_.Increment(static_cast<double>(examples));
  steps_.Increment();
  step_seconds_.Observe(seconds);
  if (in_ring_) ring_bytes_sent_.Increment(ring_bytes_per_step_);
  last_step_timestamp_.Set(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void WorkerMetrics::Phase(v1::SyncMode mode, bool switched) {
  in_ring_ = mode == v1::SYNC_MODE_ALLREDUCE;
  phase_.Set(mode == v1::SYNC_MODE_PS ? 1 : 0);
  if (switched) switches_.Increment();
}

void WorkerMetrics::PushPull(double pushed_bytes, double pulled_bytes, double seconds) {
  pushed_bytes_.Increment(pushed_bytes);
  pulled_bytes_.Increment(pulled_bytes);
  push_pull_seconds_.Observe(seconds);
}

}  // namespace strata
