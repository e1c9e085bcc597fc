// PDP and APDP, the worker's side (docs/protocol.md, "Server-decided pulls"): the worker does not
// push per step. It computes gradients on the model it holds and sums them, weighted by the
// batch's points, reports its count to the pull coordinator (partition 0's server) at a quarter,
// a half and three quarters of its share K*/P, and when the coordinator's pull request arrives it
// pushes the mean over its points (and how many there were) to every partition, then sends its
// update report. The atomic unit of work is one mini-batch of training.batch_size points, so a
// round's global count lies within about P batches of K*.
//
// PDP waits for the round's model before computing on. APDP computes on with the model it has
// while the new one travels, and installs it between two batches; it never answers a pull
// request before the previous round's model is installed, so every point it contributes was
// computed on the servers' current version or the one before (a version gap of 0 or 1, reported
// per update).
#pragma once

#include <memory>

#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"
#include "services/worker/partition_clients.h"
#include "services/worker/synchroniser.h"

namespace strata {

struct PointRoundOptions {
  PartitionClientsOptions clients;  // partition 0's server also coordinates the rounds
  int workers = 1;                  // P: the report marks are quarters of K*/P
  bool asynchronous = false;        // APDP
};

absl::StatusOr<std::unique_ptr<Synchroniser>> MakePointRoundSynchroniser(
    const PointRoundOptions& options, const Trainer& trainer);

}  // namespace strata
