// The gRPC face of the PullCoordinator (proto/strata/v1/parameter_server.proto, PullCoordinator):
// a notice stream per worker and the count reports. Served by partition 0's strata-ps in a pdp or
// apdp job, beside its ParameterServer service.
#pragma once

#include "services/parameter_server/pdp/pull_coordinator.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

class PullCoordinatorService final : public v1::PullCoordinator::Service {
 public:
  explicit PullCoordinatorService(PullCoordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status Rounds(grpc::ServerContext* context, const v1::RoundsRequest* request,
                      grpc::ServerWriter<v1::RoundNotice>* writer) override;
  grpc::Status Report(grpc::ServerContext* context, const v1::CountReport* request,
                      v1::CountReply* reply) override;

 private:
  PullCoordinator* coordinator_;
};

}  // namespace strata
