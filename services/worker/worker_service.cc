#include "services/worker/worker_service.h"

#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "services/common/ml/sgd.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"

namespace strata {
namespace {

// Posts `fn` to the training thread and waits for its result until the RPC's deadline.
template <typename T>
absl::StatusOr<T> OnTrainingThread(WorkerState& state, grpc::ServerContext* context,
                                   std::function<absl::StatusOr<T>(Trainer&)> fn) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::future<absl::StatusOr<T>> result = promise->get_future();
  state.Post([promise, fn = std::move(fn)](Trainer& trainer) { promise->set_value(fn(trainer)); });
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (context->IsCancelled()) {
      return absl::DeadlineExceededError("the worker did not reach a step boundary in time");
    }
  }
  return result.get();
}

}  // namespace

grpc::Status WorkerService::Start(grpc::ServerContext*, const v1::StartRequest* request,
                                  v1::StartReply*) {
  if (request->mode() != v1::SYNC_MODE_ALLREDUCE && request->mode() != v1::SYNC_MODE_PS) {
    return ToGrpcStatus(absl::InvalidArgumentError("Start: mode must be ALLREDUCE or PS"));
  }
  if (request->mode() == v1::SYNC_MODE_PS && request->parameter_servers().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("Start: mode PS needs parameter_servers"));
  }
  // Checked here, not when training begins: an accepted Start that fails later leaves the
  // caller believing the worker runs.
  if (request->workers_size() > world_ ||
      (request->mode() == v1::SYNC_MODE_ALLREDUCE && request->workers_size() != world_ &&
       request->workers_size() > 0)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Start names ", request->workers_size(), " workers, the job has ", world_)));
  }
  if (request->ring_source_rank() < 0 || request->ring_source_rank() >= world_ ||
      (request->ring_generation() > 0 && request->mode() != v1::SYNC_MODE_ALLREDUCE)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Start: ring_source_rank ", request->ring_source_rank(), " must lie in [0, ",
                     world_, "), and ring_generation ", request->ring_generation(),
                     " be 0 unless the mode is ALLREDUCE")));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->start) return ToGrpcStatus(absl::FailedPreconditionError("already started"));
    if (request->first_step() < 0 ||
        (request->first_step() > 0 && request->mode() != v1::SYNC_MODE_PS &&
         request->ring_generation() == 0 && request->init_checkpoint().empty())) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "Start: first_step ", request->first_step(),
          " must be >= 0, and 0 unless the mode is PS, the ring is re-formed (ring_generation) or "
          "the run resumes from a checkpoint (init_checkpoint): a new ring starts together")));
    }
    if (!request->init_checkpoint().empty()) {
      // Refused here rather than when training begins, so that the caller learns of it.
      auto confined =
          ResolveInRunDir(run_dir_, request->init_checkpoint(), "Start init_checkpoint");
      if (!confined.ok()) return ToGrpcStatus(confined.status());
    }
    if (request->mode() == v1::SYNC_MODE_ALLREDUCE && request->workers_size() < 1) {
      return ToGrpcStatus(absl::InvalidArgumentError("Start: workers list is empty"));
    }
    state_->start = *request;
  }
  state_->cv.notify_all();
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetStatus(grpc::ServerContext*, const v1::WorkerStatusRequest*,
                                      v1::WorkerStatus* reply) {
  std::lock_guard<std::mutex> lock(state_->mu);
  *reply = state_->status;
  return grpc::Status::OK;
}

grpc::Status WorkerService::Stop(grpc::ServerContext*, const v1::StopRequest* request,
                                 v1::StopReply*) {
  spdlog::info("stop requested: {}", request->reason());
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Switch(grpc::ServerContext* context, const v1::SwitchRequest* request,
                                   v1::SwitchReply* reply) {
  if (request->mode() != v1::SYNC_MODE_PS) {
    return ToGrpcStatus(absl::InvalidArgumentError("Switch: only all-reduce -> PS is supported"));
  }
  if (request->parameter_servers().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("Switch: parameter_servers is empty"));
  }
  if (request->at_step() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Switch: at_step ", request->at_step(), " is negative")));
  }
  if (!std::isfinite(request->lr()) || request->lr() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Switch: lr ", request->lr(), " is not a number >= 0")));
  }
  if (request->lr() > kMaxLearningRate) {  // the servers would refuse every push at this rate
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Switch: lr ", request->lr(), " is above the limit of ", kMaxLearningRate)));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->status.mode() != v1::SYNC_MODE_ALLREDUCE) {
      return ToGrpcStatus(
          absl::FailedPreconditionError("Switch: the worker is not in all-reduce mode"));
    }
  }
  // The ring agrees on the step: each worker votes with its step's gradients once its request
  // is due, and all switch after the first step every one of them voted for
  // (SwitchRequest.at_step). A request for a step already passed is due at once.
  auto ticket = state_->switch_participant.Request(*request);
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  if (!request->lost_peer().empty()) {
    // A fallback: the ring has lost a member, so whatever operation waits on it never completes.
    interrupt_ring_(absl::StrCat(request->lost_peer(), " is dead (the orchestrator says so)"));
  }
  state_->cv.notify_all();
  const auto& result = ticket->outcome;
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    // A caller that gives up (one peer refused, the deadline passed) withdraws the request,
    // unless the switch has already begun at its step boundary.
    if (context->IsCancelled()) state_->switch_participant.Withdraw(ticket->id);
  }
  auto done = result.get();
  if (!done.ok()) return ToGrpcStatus(done.status());
  *reply = *done;
  return grpc::Status::OK;
}

grpc::Status WorkerService::SaveCheckpoint(grpc::ServerContext* context,
                                           const v1::CheckpointRequest* request,
                                           v1::CheckpointReply* reply) {
  if (request->path().empty())
    return ToGrpcStatus(absl::InvalidArgumentError("SaveCheckpoint: empty path"));
  // A caller's path may only name a file of this run (services/common/base/run_paths.h).
  auto confined = ResolveInRunDir(run_dir_, request->path(), "SaveCheckpoint path");
  if (!confined.ok()) return ToGrpcStatus(confined.status());
  const std::string path = *confined;
  auto saved = OnTrainingThread<int64_t>(
      *state_, context, [this, path](Trainer& trainer) -> absl::StatusOr<int64_t> {
        int64_t epoch, step;
        {
          std::lock_guard<std::mutex> lock(state_->mu);
          epoch = state_->status.epoch();
          step = state_->status.step();
        }
        Checkpoint c = trainer.ToCheckpoint(epoch, step, step);
        STRATA_RETURN_IF_ERROR(WriteCheckpoint(path, c, run_dir_));
        return step;
      });
  if (!saved.ok()) return ToGrpcStatus(saved.status());
  reply->set_path(path);
  reply->set_version(*saved);
  return grpc::Status::OK;
}

namespace {

// The model of `epoch` (see ModelRequest): waits while the worker is still in all-reduce short of
// that epoch, until the RPC's deadline and for two minutes at most (a caller without a deadline
// must not hold a server thread for the rest of training).
absl::StatusOr<std::shared_ptr<const std::vector<NamedTensor>>> EpochModelOf(
    WorkerState& state, grpc::ServerContext* context, int64_t epoch) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  std::unique_lock<std::mutex> lock(state.mu);
  for (;;) {
    for (const EpochModel& m : state.epoch_models) {
      if (m.epoch == epoch) return m.tensors;
    }
    const v1::WorkerStatus& s = state.status;
    const bool may_still_get_there =
        !state.stop && !s.finished() && s.mode() == v1::SYNC_MODE_ALLREDUCE &&
        s.ring_broken().empty() &&
        (s.steps_per_epoch() == 0 || s.step() / s.steps_per_epoch() < epoch);
    if (!may_still_get_there) {
      std::string held;
      for (const EpochModel& m : state.epoch_models)
        absl::StrAppend(&held, held.empty() ? "" : ", ", m.epoch);
      return absl::FailedPreconditionError(absl::StrCat(
          "GetModel: this worker does not hold the model of epoch ", epoch, " (it holds epochs [",
          held, "], is at step ", s.step(), ", mode ", v1::SyncMode_Name(s.mode()), ")"));
    }
    if (context->IsCancelled() || std::chrono::steady_clock::now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("GetModel: the worker did not reach the end of epoch ", epoch, " in time"));
    }
    state.cv.wait_for(lock, std::chrono::milliseconds(100));
  }
}

}  // namespace

grpc::Status WorkerService::GetModel(grpc::ServerContext* context, const v1::ModelRequest* request,
                                     grpc::ServerWriter<v1::TensorChunk>* writer) {
  std::shared_ptr<const std::vector<NamedTensor>> model;
  if (request->epoch() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("GetModel: epoch must be >= 0"));
  }
  if (request->epoch() > 0) {
    auto held = EpochModelOf(*state_, context, request->epoch());
    if (!held.ok()) return ToGrpcStatus(held.status());
    model = *std::move(held);
  } else {
    auto live = OnTrainingThread<std::vector<NamedTensor>>(
        *state_, context, [](Trainer& trainer) -> absl::StatusOr<std::vector<NamedTensor>> {
          return trainer.ModelTensors();
        });
    if (!live.ok()) return ToGrpcStatus(live.status());
    model = std::make_shared<const std::vector<NamedTensor>>(*std::move(live));
  }
  for (const NamedTensor& t : *model) {
    absl::Status s = EncodeTensor({&t.spec, t.data.data()}, {},
                                  [&](const v1::TensorChunk& c) { return writer->Write(c); });
    if (!s.ok()) return ToGrpcStatus(s);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetHandoverModel(grpc::ServerContext*,
                                             const v1::HandoverModelRequest* request,
                                             grpc::ServerWriter<v1::CheckpointChunk>* writer) {
  std::shared_ptr<const std::string> model;
  int64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    model = state_->handover_model;
    held = state_->status.handover_model_step();
  }
  if (model == nullptr || held != request->step()) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "GetHandoverModel: this worker holds no handover model of step ", request->step(),
        held > 0 ? absl::StrCat(" (it holds step ", held, ")") : std::string(" (yet)"))));
  }
  // Small chunks, so sender and receiver overlap: 64 KiB (gRPC's initial flow-control window)
  // fetched a 2 MB ResNet-20 model in 42-67 ms against 62-89 ms with 1 MiB chunks, with the
  // evaluator busy on the same two cores (docs/benchmarks.md, "Strategy-Switch").
  constexpr size_t kChunkBytes = size_t{64} << 10;
  v1::CheckpointChunk chunk;
  chunk.set_total_bytes(model->size());
  for (size_t offset = 0; offset == 0 || offset < model->size(); offset += kChunkBytes) {
    chunk.set_offset(offset);
    chunk.set_data(model->substr(offset, kChunkBytes));
    if (!writer->Write(chunk)) return ToGrpcStatus(absl::CancelledError("the caller went away"));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::ReformRing(grpc::ServerContext*, const v1::ReformRingRequest* request,
                                       v1::ReformRingReply*) {
  const bool reform = request->workers_size() > 0;
  if (!reform && request->lost_peer().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("ReformRing: neither lost_peer nor workers"));
  }
  if (reform &&
      (request->workers_size() != world_ || request->source_rank() < 0 ||
       request->source_rank() >= world_ || request->step() < 0 || request->generation() == 0)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("ReformRing: ", request->workers_size(), " workers (the job has ", world_,
                     "), source_rank ", request->source_rank(), ", step ", request->step(),
                     ", generation ", request->generation(),
                     ": the workers must number the world, the source lie in it, the "
                     "step be >= 0 and the generation > 0")));
  }
  for (const std::string& w : request->workers()) {
    if (w.empty()) return ToGrpcStatus(absl::InvalidArgumentError("ReformRing: empty address"));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->status.mode() != v1::SYNC_MODE_ALLREDUCE) {
      return ToGrpcStatus(
          absl::FailedPreconditionError("ReformRing: the worker is not in all-reduce mode"));
    }
    if (reform) {
      // The new ring goes only to a worker that has given up the old one, so it acts on it at
      // once and a stray request cannot linger until some later failure.
      if (state_->status.ring_broken().empty()) {
        return ToGrpcStatus(absl::FailedPreconditionError(
            "ReformRing: the ring is not broken on this worker (interrupt it first: lost_peer)"));
      }
      if (request->generation() <= state_->status.ring_generation()) {
        return ToGrpcStatus(absl::InvalidArgumentError(
            absl::StrCat("ReformRing: generation ", request->generation(),
                         " is not above this worker's ", state_->status.ring_generation())));
      }
      state_->reform = *request;
    }
  }
  // Only the first form interrupts: the second must not break the ring it is about to form.
  if (!reform) {
    interrupt_ring_(absl::StrCat(request->lost_peer(), " is dead (the orchestrator says so)"));
  }
  state_->cv.notify_all();
  return grpc::Status::OK;
}

}  // namespace strata
