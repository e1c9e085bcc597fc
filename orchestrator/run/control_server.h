// The orchestrator's control channel (proto RunControl): `strata switch` asks for the switch,
// `strata status` and `strata resume` learn whether the run is alive, by a call rather than by
// a file and the orchestrator's pid (a pid can be reused by another process), and `strata predict`
// asks a stream job's replicas through the orchestrator, which holds the run token. It is served on a
// Unix socket in a directory of mode 0700, `RUN_DIR/.control/`, so only the user who runs the job
// (and root) can connect; that replaces the run token, which is on no disk and so out of the
// reach of a separate `strata` command. A socket path holds at most 107 bytes: for a longer run
// directory the socket goes into a directory mkdtemp makes in the temporary directory instead.
// The path is published in status.json (`control_socket`). A run directory whose orchestrator runs
// where this machine's /tmp is not (a container) has no usable socket; the commands then fall back
// to `switch.request` and the status files (docs/architecture.md, "The control channel").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <absl/status/statusor.h>

#include "strata/v1/run_control.grpc.pb.h"

namespace grpc {
class Server;
class Status;
}

namespace strata {

// Answers RunControl.Predict (a stream job's replicas); on gRPC's threads.
using RunPredictHandler =
    std::function<grpc::Status(const v1::RunPredictRequest&, v1::PredictReply*)>;

class RunControlServer {
 public:
  // `info` answers GetRunInfo; it runs on gRPC's threads, so it must only read state that is
  // safe to read from them (a snapshot under its own lock). Without `predict`, Predict is
  // FAILED_PRECONDITION (a run that has nothing to answer with).
  static absl::StatusOr<std::unique_ptr<RunControlServer>> Start(
      const std::string& run_dir, std::function<v1::RunInfo()> info,
      RunPredictHandler predict = nullptr);
  ~RunControlServer();  // stops serving and removes the socket and its directory
  RunControlServer(const RunControlServer&) = delete;
  RunControlServer& operator=(const RunControlServer&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  // The supervision loop's side: true once for each SwitchNow received since the last call
  // (several calls in between count as one request).
  bool TakeSwitchRequest();

 private:
  class Service;
  RunControlServer() = default;

  std::string dir_, socket_path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// The client side, for the commands. UNAVAILABLE when nothing answers on `socket_path` (the
// orchestrator has ended, or runs where this machine cannot reach the socket).
absl::StatusOr<v1::RunInfo> GetRunInfo(const std::string& socket_path,
                                       std::chrono::milliseconds deadline);
absl::Status RequestSwitchNow(const std::string& socket_path, const std::string& requested_by,
                              std::chrono::milliseconds deadline);
// The replica's refusal comes back as its status (INVALID_ARGUMENT with what was wrong).
absl::StatusOr<v1::PredictReply> PredictThroughRun(const std::string& socket_path,
                                                   const v1::RunPredictRequest& request,
                                                   std::chrono::milliseconds deadline);

// Whether the orchestrator of a run that status.json says is running still runs.
enum class OrchestratorLiveness {
  kAlive,    // it answered on its control socket
  kGone,     // nothing answers on its socket; or, without one, status.json (rewritten about once
             // a second while the run lives) has not changed for a minute
  kUnknown,  // no socket to ask and status.json is recent: it runs where this machine cannot
             // call it (a container), or it has only just stopped
};
// `control_socket` and `status_updated_s` (seconds since the Unix epoch) as status.json holds
// them; an empty socket means the run published none.
OrchestratorLiveness ProbeOrchestrator(const std::string& control_socket, double status_updated_s);

}  // namespace strata
