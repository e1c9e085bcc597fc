// The parameter-server synchroniser: the worker's side of push/pull (docs/protocol.md).
// Start() pulls every partition concurrently into the trainer; Step() sends each partition its
// gradients (and float buffers as values) and receives the updated weights in one PushPull round
// trip per partition, all partitions concurrently. Every call carries the clients' deadline; a
// timeout or a refusal names the server (partition index and address).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"
#include "services/worker/partition_clients.h"
#include "services/worker/synchroniser.h"

namespace strata {

class WorkerMetrics;  // worker_metrics.h

struct PushPullOptions {
  PartitionClientsOptions clients;  // the servers, this worker's rank, the deadline per call
  // The learning rate the servers apply to this worker's pushes (PushHeader.lr); 0: theirs.
  double lr = 0;
  // Pipelined: each step's exchange travels while the next step computes (on the model the
  // previous exchange brought), so a worker's gradients are at most one version staler than
  // without it. Drain() then completes the last exchange.
  bool pipeline = false;
  // Each exchange's bytes and round trip go here (borrowed; null: not counted).
  WorkerMetrics* metrics = nullptr;
};

// The partition plan is computed from the trainer's parameters() then buffers(), as the servers
// compute it from a whole-model checkpoint.
absl::StatusOr<std::unique_ptr<Synchroniser>> MakePushPullSynchroniser(
    const PushPullOptions& options, const Trainer& trainer);

}  // namespace strata
