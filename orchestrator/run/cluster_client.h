// The orchestrator's calls to the services it runs: workers, parameter servers and the evaluator,
// addressed by rank or partition. The run supervisor and its controllers talk to the cluster only
// through this interface; GrpcClusterClient is the real one (one stub per service, a deadline on
// every call), tests use a fake that answers as scripted.
//
// Calls that may take long (a switch the workers carry out at a future step, loading a
// checkpoint, an evaluation) are started and then polled (PendingReply), so that the single
// supervisor loop never waits on one of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/common/wire/checkpoint.h"
#include "services/common/wire/tensor.h"
#include "strata/v1/evaluator.pb.h"
#include "strata/v1/parameter_server.pb.h"
#include "strata/v1/worker.pb.h"

namespace strata {

// A call in flight. Destroying it cancels the call if it has not finished.
template <typename Reply>
class PendingReply {
 public:
  virtual ~PendingReply() = default;
  virtual bool done() const = 0;
  // The reply, or what went wrong, naming the peer; valid once done().
  virtual const absl::StatusOr<Reply>& result() const = 0;
  // Gives up on the call: the peer sees it cancelled (a worker then withdraws a pending switch).
  virtual void Cancel() = 0;
};

// A parameter server's partition as an observer reads it back.
struct ServerModelRead {
  std::vector<int64_t> header_versions;  // the model version each header of the stream named
  std::vector<NamedTensor> tensors;
};

class ClusterClient {
 public:
  using Timeout = std::chrono::milliseconds;

  virtual ~ClusterClient() = default;

  virtual int worker_count() const = 0;
  virtual int server_count() const = 0;

  virtual absl::Status StartWorker(int rank, const v1::StartRequest& request, Timeout timeout) = 0;
  // The error of a worker that does not answer is the transport's own message (no context): the
  // caller decides when silence means death and says so.
  virtual absl::StatusOr<v1::WorkerStatus> GetWorkerStatus(int rank, Timeout timeout) = 0;
  // Like GetWorkerStatus, for parameter server `server`.
  virtual absl::StatusOr<v1::ServerStatus> GetServerStatus(int server, Timeout timeout) = 0;
  // Interrupts a worker's broken ring, or hands it the re-formed one (v1::ReformRingRequest).
  virtual absl::Status ReformRing(int rank, const v1::ReformRingRequest& request,
                                  Timeout timeout) = 0;
  // The worker switches at the agreed step and answers once it trains against the servers.
  virtual std::unique_ptr<PendingReply<v1::SwitchReply>> BeginSwitch(
      int rank, const v1::SwitchRequest& request, Timeout timeout) = 0;
  virtual std::unique_ptr<PendingReply<v1::CheckpointReply>> BeginLoadCheckpoint(
      int server, const v1::CheckpointRequest& request, Timeout timeout) = 0;
  // Where the parameter servers reach worker `rank`, to stream its handover model.
  virtual std::string WorkerAddress(int rank) const = 0;
  // The handover model worker `rank` keeps for `step` (what the servers load), read the same way.
  virtual absl::StatusOr<Checkpoint> ReadHandoverModel(int rank, int64_t step, Timeout timeout) = 0;
  // Reads a server's partition as an observer (never held back by consistency rules). Errors
  // carry the transport's or the decoder's own message.
  virtual absl::StatusOr<ServerModelRead> ReadServerModel(int server, Timeout timeout) = 0;
  virtual std::unique_ptr<PendingReply<v1::EvalMetrics>> BeginEvaluate(
      const v1::EvaluateModelRequest& request, Timeout timeout) = 0;

  // Asks a service to exit cleanly; best effort (the launcher signals whatever stays).
  virtual void StopWorker(int rank, const std::string& reason, Timeout timeout) = 0;
  virtual void StopServer(int server, const std::string& reason, Timeout timeout) = 0;
  virtual void StopEvaluator(const std::string& reason, Timeout timeout) = 0;
};

}  // namespace strata
