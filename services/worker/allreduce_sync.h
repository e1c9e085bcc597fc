// The all-reduce synchroniser: every step, the ranks average their gradients and their float
// buffers (BatchNorm running statistics) with one ring all-reduce, then each applies the same
// local SGD step, so the replicas stay bit-identical (the ring hands every rank the same bits).
#pragma once

#include <memory>

#include <absl/status/statusor.h>

#include "services/worker/ring_allreduce.h"
#include "services/worker/synchroniser.h"

namespace strata {

// `ring` must be connected and outlive the synchroniser. Start() broadcasts the parameters,
// buffers and optimizer velocity of `source_rank` (rank 0 at the start of a job; after the ring
// was re-formed, the survivor that completed the most steps) so that every replica starts from the
// same model (also after a checkpoint was loaded on one rank only).
absl::StatusOr<std::unique_ptr<Synchroniser>> MakeAllReduceSynchroniser(
    RingAllReduce* ring, const AllReduceOptions& options, int source_rank = 0);

}  // namespace strata
