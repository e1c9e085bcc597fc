// The all-reduce synchroniser: every step, the ranks average their gradients and their float
// buffers (BatchNorm running statistics) with one ring all-reduce, then each applies the same
// local SGD step, so the replicas stay bit-identical (the ring hands every rank the same bits).
// With buckets (bucket_bytes > 0) the gradients are averaged bucket by bucket while backward
// runs (bucket_reduction.h), and the buffers with the switch vote in one small operation after it.
#pragma once

#include <memory>

#include <absl/status/statusor.h>

#include "services/collective/ring_allreduce.h"
#include "services/worker/synchroniser.h"

namespace strata {

struct AllReduceSyncOptions {
  AllReduceOptions ring;  // every operation's deadline and segment size
  // Start() broadcasts the parameters, buffers and optimizer velocity of this rank (rank 0 at the
  // start of a job; after the ring was re-formed, the survivor that completed the most steps) so
  // that every replica starts from the same model (also after a checkpoint was loaded on one rank
  // only).
  int source_rank = 0;
  // > 0: reduce the gradients in buckets of about this many bytes while backward runs
  // (strategy.bucket_mb); 0: in one operation after backward.
  size_t bucket_bytes = 0;
};

// `ring` must be connected and outlive the synchroniser; so must the trainer given to Start().
absl::StatusOr<std::unique_ptr<Synchroniser>> MakeAllReduceSynchroniser(
    RingAllReduce* ring, const AllReduceSyncOptions& options);

}  // namespace strata
