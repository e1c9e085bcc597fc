// The Sharder gRPC service (proto/strata/v1/sharder.proto): the one-shot sharding as a request,
// for compose and Kubernetes where the sharder runs as its own container.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "strata/v1/sharder.grpc.pb.h"

namespace strata::sharder {

class SharderService final : public v1::Sharder::Service {
 public:
  // `on_stop` is called (once per Stop request) to shut the server down from outside the handler.
  // Every path a request names (config, out_dir, run_dir) must resolve inside `run_dir`
  // (services/common/base/run_paths.h); with `run_dir` empty, requests may name no paths at all.
  SharderService(std::function<void()> on_stop, std::string run_dir)
      : on_stop_(std::move(on_stop)), run_dir_(std::move(run_dir)) {}

  grpc::Status Shard(grpc::ServerContext* context, const v1::ShardRequest* request,
                     v1::ShardReply* reply) override;
  grpc::Status Stop(grpc::ServerContext* context, const v1::StopRequest* request,
                    v1::StopReply* reply) override;

 private:
  std::function<void()> on_stop_;
  const std::string run_dir_;
  // One plan at a time: PCA/KMeans already use every core and a data set copy each.
  std::mutex planning_;
};

}  // namespace strata::sharder
