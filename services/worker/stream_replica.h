// One replica of a stream job (strategy.kind stream; docs/protocol.md, "Stream replicas"): a
// strata-worker that reads the job's Redis stream as a member of its consumer group, trains on a
// tumbling window of `stream.batch_events` events, applies the gradient to its own model at once,
// and sends it, `stream.max_grad_buffer` at a time, to every other replica (GradientMesh), whose
// gradients it applies as they arrive. No server, no barrier.
//
// The invariants the tests hold it to: every replica applies every gradient exactly once (its
// own and every other's: the mesh refuses a gap or a repeat); once the stream stops and every
// buffer is flushed, the replicas' parameters agree up to the order of the additions (plain SGD:
// the job checks refuse momentum and weight decay, whose updates do not commute); an event is
// acknowledged only after its gradient was applied, and a malformed one (stream_event.h) is
// counted, logged with its entry id and acknowledged without reaching the model. Each remote
// gradient's staleness (the size of the symmetric difference between the gradients its sender had
// applied and those the receiver has applied, as TensAIR defines it) goes into a histogram.
//
// Replicas find each other through the broker: each writes its address into a hash beside the
// stream, under the run's nonce, and waits until every replica's is there.
#pragma once

#include <absl/status/status.h>

#include "services/worker/worker.h"

namespace strata {

// Trains until the group has been handed stream.max_events events or stream.max_seconds have
// passed, then flushes, waits for every peer's last gradient and writes
// stream/replica-<rank>.json and checkpoints/replica-<rank>.ckpt under the run directory.
absl::Status RunStreamReplica(const WorkerOptions& options);

}  // namespace strata
