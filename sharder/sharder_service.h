// The Sharder gRPC service (proto/strata/v1/sharder.proto): the one-shot sharding as a request,
// for compose and Kubernetes where the sharder runs as its own container.
#pragma once

#include <functional>
#include <mutex>

#include "strata/v1/sharder.grpc.pb.h"

namespace strata::sharder {

class SharderService final : public v1::Sharder::Service {
 public:
  // `on_stop` is called (once per Stop request) to shut the server down from outside the handler.
  explicit SharderService(std::function<void()> on_stop) : on_stop_(std::move(on_stop)) {}

  grpc::Status Shard(grpc::ServerContext* context, const v1::ShardRequest* request,
                     v1::ShardReply* reply) override;
  grpc::Status Stop(grpc::ServerContext* context, const v1::StopRequest* request,
                    v1::StopReply* reply) override;

 private:
  std::function<void()> on_stop_;
  // One plan at a time: PCA/KMeans already use every core and a data set copy each.
  std::mutex planning_;
};

}  // namespace strata::sharder
