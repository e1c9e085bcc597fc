// The gRPC face of one parameter-server partition (proto/strata/v1/parameter_server.proto):
// decodes and validates pushes, streams pulls, serves status, progress and checkpoints. A bad
// request is refused with INVALID_ARGUMENT and changes nothing; the service never aborts on input.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "services/parameter_server/partition.h"
#include "services/parameter_server/tcp_push_pull_server.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

struct ParameterServerServiceOptions {
  // Default place for checkpoints (<run_dir>/checkpoints/ps-<I>.ckpt), and the only directory
  // whose files the checkpoint RPCs may name; without it they accept no path.
  std::string run_dir;
  size_t chunk_bytes = 1 << 20;
  std::function<void(const std::string& reason)> on_stop;  // called by the Stop RPC
  // The plain-TCP data plane the DataPlane RPC hands out (tcp_push_pull_server.h); null: none.
  const TcpPushPullServer* data_plane = nullptr;
};

class ParameterServerService final : public v1::ParameterServer::Service {
 public:
  ParameterServerService(ParameterPartition* partition, ParameterServerServiceOptions options);

  grpc::Status PushPull(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::PullResponse, v1::PushRequest>* stream) override;
  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<v1::PushRequest>* reader,
                    v1::PushReply* reply) override;
  grpc::Status Pull(grpc::ServerContext* context, const v1::PullRequest* request,
                    grpc::ServerWriter<v1::PullResponse>* writer) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::ServerStatusRequest* request,
                         v1::ServerStatus* reply) override;
  grpc::Status WatchProgress(grpc::ServerContext* context, const v1::WatchProgressRequest* request,
                             grpc::ServerWriter<v1::Progress>* writer) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext* context, const v1::CheckpointRequest* request,
                              v1::CheckpointReply* reply) override;
  grpc::Status LoadCheckpoint(grpc::ServerContext* context, const v1::CheckpointRequest* request,
                              v1::CheckpointReply* reply) override;
  grpc::Status Stop(grpc::ServerContext* context, const v1::StopRequest* request,
                    v1::StopReply* reply) override;
  grpc::Status DataPlane(grpc::ServerContext* context, const v1::DataPlaneRequest* request,
                         v1::DataPlaneOffer* reply) override;

  // Also used by the periodic saver and --init-checkpoint.
  absl::StatusOr<v1::CheckpointReply> Save(const std::string& path);
  // `beneath`: the directory `path` must lie in, no link followed below it (a request's path:
  // the run directory); empty for the operator's --init-checkpoint.
  absl::StatusOr<v1::CheckpointReply> Load(const std::string& path,
                                           const std::string& beneath = "");
  // The handover model of `step`, streamed from a worker (no shared file system needed).
  absl::StatusOr<v1::CheckpointReply> LoadFromWorker(
      const std::string& worker, int64_t step, std::chrono::system_clock::time_point deadline);
  absl::StatusOr<v1::CheckpointReply> Install(const Checkpoint& checkpoint,
                                              const std::string& origin);
  std::string DefaultCheckpointPath() const;

 private:
  using ReadFn = std::function<bool(v1::PushRequest*)>;
  // Reads a whole push from the stream and applies it; returns the version to pull at.
  absl::StatusOr<int64_t> ReceivePush(grpc::ServerContext* context, const ReadFn& read);
  absl::Status SendPull(const PullSnapshot& snapshot,
                        const std::function<bool(const v1::PullResponse&)>& write);

  ParameterPartition* partition_;
  ParameterServerServiceOptions options_;
};

}  // namespace strata
