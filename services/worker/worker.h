// The worker process: trains its shard with a pluggable synchroniser and serves the Worker
// control service (and the ring's Collective service) on one gRPC server.
//
// One thread owns the Trainer. RPCs that need the model (GetModel, SaveCheckpoint) and the switch
// are handed to that thread and run at a step boundary, so they always see a consistent model
// and never race the optimizer.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>

#include "services/common/metrics/metrics_endpoint.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct WorkerOptions {
  v1::ResolvedJob job;  // what `strata` resolved (services/common/config/resolved_job.h)
  int rank = 0;
  std::string shard_file;  // empty: the whole training split (or rank::world striding for tests)
  std::string listen = "127.0.0.1:0";
  // Also serve the ring here, e.g. "unix-abstract:NAME" for peers on the same machine (the local
  // launcher's default; the peers then dial this address instead of `listen`).
  std::string ring_listen;
  std::string port_file;
  std::string run_dir;  // checkpoints/ goes here
  // Deadline of every blocking operation: ring steps, pushes and pulls, waiting for servers to
  // load a handed-over model.
  std::chrono::milliseconds deadline{120000};
  // Rank 0 of a ring saves the model with its momentum to <run_dir>/checkpoints/ring.ckpt this
  // often while it trains in all-reduce: what `strata resume` continues from. 0: never.
  std::chrono::milliseconds ring_checkpoint_every{0};
  // The Prometheus endpoint (worker_metrics.h says what it shows); no listen address: none.
  MetricsEndpointOptions metrics;
  // A stream job's replica (stream_replica.h): the broker to read (empty: stream.address; `strata
  // run` passes its embedded broker's socket) and the run's nonce, under which the replicas find
  // each other's addresses on the broker.
  std::string stream_address;
  std::string stream_run;
  // A stream job with stream.sync servers: the parameter servers' addresses (host:port), in
  // partition order.
  std::vector<std::string> parameter_servers;

  int world() const { return job.cluster().workers(); }
};

// Runs the worker until Stop (or a fatal start-up error). Training errors do not end the process:
// they are reported through GetStatus so that the orchestrator can name the failing peer.
absl::Status RunWorker(const WorkerOptions& options);

// The options of push/pull clients to `servers` as the job asks for them: the data plane
// (strategy.ps_link, none with TLS on), shared memory, split tensors, 16-bit exchanges
// (strategy.push_compression; a warning where they cannot travel in 16 bits).
struct PartitionClientsOptions;
PartitionClientsOptions PushPullClientsFor(const WorkerOptions& options,
                                           const std::vector<std::string>& servers);

}  // namespace strata
