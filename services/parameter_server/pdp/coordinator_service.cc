#include "services/parameter_server/pdp/coordinator_service.h"

#include "services/common/base/status.h"

namespace strata {

grpc::Status PullCoordinatorService::Rounds(grpc::ServerContext* context,
                                            const v1::RoundsRequest* request,
                                            grpc::ServerWriter<v1::RoundNotice>* writer) {
  const absl::StatusOr<int64_t> subscribed = coordinator_->Subscribe(request->worker());
  if (!subscribed.ok()) return ToGrpcStatus(subscribed.status());
  int64_t after = -1;
  grpc::Status result = grpc::Status::OK;
  for (;;) {
    const std::optional<RoundNoticeView> notice = coordinator_->Next(
        after, context->deadline(), [context] { return context->IsCancelled(); });
    if (!notice) {
      result = grpc::Status(grpc::StatusCode::CANCELLED, "the notice stream ended");
      break;
    }
    v1::RoundNotice out;
    out.set_round(notice->round);
    out.set_k_star(notice->k_star);
    out.set_workers(coordinator_->workers());
    out.set_end(notice->end);
    out.set_current_round(notice->current_round);
    if (!writer->Write(out) || notice->end) break;
    // After the announcement, only rounds pulled after the subscription.
    after = after < 0 ? *subscribed : notice->round;
  }
  coordinator_->Unsubscribe(request->worker());
  return result;
}

grpc::Status PullCoordinatorService::Report(grpc::ServerContext*, const v1::CountReport* request,
                                            v1::CountReply* reply) {
  CountReportView view;
  view.worker = request->worker();
  view.round = request->round();
  view.points = request->points();
  view.seconds = request->seconds();
  view.update = request->update();
  view.loss = request->loss();
  view.version_used = request->version_used();
  view.version_gap = request->version_gap();
  view.dropped = request->dropped();
  const absl::StatusOr<int64_t> k_star = coordinator_->Report(view);
  if (!k_star.ok()) return ToGrpcStatus(k_star.status());
  reply->set_k_star(*k_star);
  return grpc::Status::OK;
}

}  // namespace strata
