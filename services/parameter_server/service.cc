#include "services/parameter_server/service.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/handover_fetch.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"

namespace strata {
namespace {

WaitOptions WaitFor(grpc::ServerContext* context) {
  WaitOptions wait;
  wait.deadline = context->deadline();
  wait.cancelled = [context] { return context->IsCancelled(); };
  return wait;
}

}  // namespace

ParameterServerService::ParameterServerService(ParameterPartition* partition,
                                               ParameterServerServiceOptions options)
    : partition_(partition), options_(std::move(options)) {}

absl::StatusOr<int64_t> ParameterServerService::ReceivePush(grpc::ServerContext* context,
                                                            const ReadFn& read) {
  auto refused = [&](absl::Status s) {
    if (s.code() == absl::StatusCode::kInvalidArgument) partition_->CountRejected();
    return s;
  };
  v1::PushRequest request;
  if (!read(&request)) return refused(absl::InvalidArgumentError("empty push stream: no header"));
  if (!request.has_header()) {
    return refused(absl::InvalidArgumentError("a push stream must start with a PushHeader"));
  }
  const v1::PushHeader& h = request.header();
  PushMeta meta{h.worker(), h.version(), h.clock(), h.samples(), h.lr()};
  if (absl::Status s = CheckPushMeta(meta, partition_->config().workers); !s.ok()) {
    return refused(s);
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PushStaging> staging, partition_->NewStaging());
  // The stream may carry exactly this partition's bytes: anything more is refused as it arrives.
  AssemblerLimits limits;
  limits.max_tensor_bytes = staging->total_bytes();
  limits.max_total_bytes = staging->total_bytes();
  TensorAssembler assembler([&](const TensorSpec& spec) { return staging->Destination(spec); },
                            limits);
  while (read(&request)) {
    if (!request.has_chunk()) {
      return refused(absl::InvalidArgumentError(
          absl::StrCat("push from worker ", meta.worker, ": a second header inside the stream")));
    }
    if (absl::Status s = assembler.Add(request.chunk()); !s.ok()) {
      return refused(Annotate(s, absl::StrCat("push from worker ", meta.worker)));
    }
  }
  if (context->IsCancelled()) return absl::CancelledError("the pushing worker went away");
  if (absl::Status s = assembler.Finish(); !s.ok()) {
    return refused(Annotate(s, absl::StrCat("push from worker ", meta.worker)));
  }
  if (absl::Status s = staging->Validate(); !s.ok()) {
    return refused(Annotate(s, absl::StrCat("push from worker ", meta.worker)));
  }
  auto version = partition_->Push(meta, *staging, WaitFor(context));
  if (!version.ok()) return refused(version.status());
  return version;
}

absl::Status ParameterServerService::SendPull(
    const PullSnapshot& snapshot, const std::function<bool(const v1::PullResponse&)>& write) {
  v1::PullResponse response;
  response.mutable_header()->set_version(snapshot.version);
  response.mutable_header()->set_global_epoch(snapshot.global_epoch);
  response.mutable_header()->set_samples(snapshot.samples);
  response.mutable_header()->set_sample_budget(snapshot.sample_budget);
  if (!write(response)) return absl::UnavailableError("the pulling worker went away");
  // The bytes go from the snapshot straight into the reused response: one copy.
  ChunkOptions chunking;
  chunking.chunk_bytes = options_.chunk_bytes;
  v1::TensorChunk* chunk = response.mutable_chunk();
  for (const auto& e : snapshot.layout->entries) {
    absl::Status sent = EncodeTensorInto({&e.spec, snapshot.values->data() + e.offset}, chunking,
                                         chunk, [&] { return write(response); });
    if (!sent.ok()) return absl::UnavailableError("the pulling worker went away");
  }
  return absl::OkStatus();
}

grpc::Status ParameterServerService::PushPull(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::PullResponse, v1::PushRequest>* stream) {
  int worker = -1;
  auto version = ReceivePush(context, [&](v1::PushRequest* r) {
    if (!stream->Read(r)) return false;
    if (r->has_header()) worker = r->header().worker();
    return true;
  });
  if (!version.ok()) return ToGrpcStatus(version.status());
  auto snapshot = partition_->Pull(worker, *version, WaitFor(context));
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  return ToGrpcStatus(
      SendPull(*snapshot, [&](const v1::PullResponse& r) { return stream->Write(r); }));
}

grpc::Status ParameterServerService::Push(grpc::ServerContext* context,
                                          grpc::ServerReader<v1::PushRequest>* reader,
                                          v1::PushReply* reply) {
  auto version = ReceivePush(context, [&](v1::PushRequest* r) { return reader->Read(r); });
  if (!version.ok()) return ToGrpcStatus(version.status());
  reply->set_version(*version);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext* context,
                                          const v1::PullRequest* request,
                                          grpc::ServerWriter<v1::PullResponse>* writer) {
  if (request->clock() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("pull with a negative clock"));
  }
  auto snapshot = partition_->Pull(request->worker(), 0, WaitFor(context));
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  return ToGrpcStatus(
      SendPull(*snapshot, [&](const v1::PullResponse& r) { return writer->Write(r); }));
}

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext*, const v1::ServerStatusRequest*,
                                               v1::ServerStatus* reply) {
  const PartitionStatus s = partition_->Status();
  const PartitionConfig& c = partition_->config();
  reply->set_partition(c.partition);
  reply->set_partitions(c.partitions);
  reply->set_workers(c.workers);
  reply->set_consistency(c.consistency);
  reply->set_staleness(c.staleness);
  reply->set_loaded(s.loaded);
  reply->set_version(s.version);
  reply->set_pushes(s.pushes);
  reply->set_rejected_pushes(s.rejected_pushes);
  reply->set_samples(s.samples);
  reply->set_global_epoch(s.global_epoch);
  reply->set_completed_epochs(s.completed_epochs);
  reply->set_max_clock_gap(s.max_clock_gap);
  reply->set_waited_pulls(s.waited_pulls);
  reply->set_waiting_now(s.waiting_now);
  reply->set_lr(s.lr);
  reply->set_bytes(static_cast<int64_t>(s.bytes));
  reply->set_sample_budget(s.sample_budget);
  reply->set_discarded_pushes(s.discarded_pushes);
  if (options_.data_plane != nullptr) {
    reply->set_shared_memory_exchanges(options_.data_plane->shared_exchanges());
  }
  for (int64_t v : s.staleness_histogram) reply->add_staleness_histogram(v);
  for (int64_t v : s.served_staleness_low) reply->add_served_staleness_low(v);
  for (int64_t v : s.served_staleness_high) reply->add_served_staleness_high(v);
  for (int64_t v : s.clocks) reply->add_clocks(v);
  for (const auto& t : s.tensors) reply->add_tensors(t);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::WatchProgress(grpc::ServerContext* context,
                                                   const v1::WatchProgressRequest*,
                                                   grpc::ServerWriter<v1::Progress>* writer) {
  int64_t sent_epochs = -1;
  for (;;) {
    const PartitionStatus s = partition_->Status();
    if (s.completed_epochs != sent_epochs) {
      v1::Progress p;
      p.set_version(s.version);
      p.set_samples(s.samples);
      p.set_global_epoch(s.global_epoch);
      p.set_completed_epochs(s.completed_epochs);
      if (!writer->Write(p)) return grpc::Status::OK;
      sent_epochs = s.completed_epochs;
    }
    if (context->IsCancelled()) return grpc::Status::OK;
    if (context->deadline() <= std::chrono::system_clock::now()) return grpc::Status::OK;
    // Bounded waits so a client that went away frees the thread.
    partition_->WaitForProgress(sent_epochs, std::chrono::milliseconds(250));
    if (partition_->stopping()) return grpc::Status::OK;
  }
}

std::string ParameterServerService::DefaultCheckpointPath() const {
  if (options_.run_dir.empty()) return "";
  return absl::StrCat(options_.run_dir, "/",
                      run_files::ServerCheckpoint(partition_->config().partition));
}

absl::StatusOr<v1::CheckpointReply> ParameterServerService::Save(const std::string& requested) {
  std::string path = requested.empty() ? DefaultCheckpointPath() : requested;
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "SaveCheckpoint without a path needs --run-dir on the server");
  }
  if (!partition_->loaded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("partition ", partition_->config().partition, " holds no model to save"));
  }
  const Checkpoint c = partition_->ToCheckpoint();
  // Inside the run directory (every path here is: the default one or a confined request),
  // written from a descriptor of it with no link followed, missing directories made 0700.
  STRATA_RETURN_IF_ERROR(WriteCheckpoint(path, c, options_.run_dir));
  v1::CheckpointReply reply;
  reply.set_path(path);
  reply.set_version(c.version);
  reply.set_tensors(static_cast<int32_t>(c.entries.size()));
  return reply;
}

absl::StatusOr<v1::CheckpointReply> ParameterServerService::Load(const std::string& path,
                                                                 const std::string& beneath) {
  if (path.empty()) return absl::InvalidArgumentError("LoadCheckpoint needs a path");
  STRATA_ASSIGN_OR_RETURN(Checkpoint c, ReadCheckpoint(path, beneath));
  return Install(c, path);
}

absl::StatusOr<v1::CheckpointReply> ParameterServerService::LoadFromWorker(
    const std::string& worker, int64_t step, std::chrono::system_clock::time_point deadline) {
  if (step <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadCheckpoint from worker ", worker, ": from_worker_step must be > 0"));
  }
  // A caller without a deadline must not hold this thread for ever on a silent worker.
  HandoverFetchOptions fetch;
  fetch.deadline = std::min(deadline, DeadlineAfter(std::chrono::minutes(2)));
  STRATA_ASSIGN_OR_RETURN(Checkpoint c, FetchHandoverModel(worker, step, fetch));
  return Install(c, absl::StrCat("worker ", worker, " (step ", step, ")"));
}

absl::StatusOr<v1::CheckpointReply> ParameterServerService::Install(const Checkpoint& c,
                                                                    const std::string& origin) {
  STRATA_RETURN_IF_ERROR(partition_->Load(c, origin));
  const PartitionStatus s = partition_->Status();
  spdlog::info(
      "loaded partition {} of {} from {}: {} tensors, {} bytes, version {}, global epoch {:.3f}",
      partition_->config().partition, partition_->config().partitions, origin, s.tensors.size(),
      s.bytes, s.version, s.global_epoch);
  v1::CheckpointReply reply;
  reply.set_path(origin);
  reply.set_version(s.version);
  reply.set_tensors(static_cast<int32_t>(s.tensors.size()));
  return reply;
}

grpc::Status ParameterServerService::SaveCheckpoint(grpc::ServerContext*,
                                                    const v1::CheckpointRequest* request,
                                                    v1::CheckpointReply* reply) {
  // A caller's path may only name a file of this run (services/common/base/run_paths.h).
  std::string path;
  if (!request->path().empty()) {
    auto confined = ResolveInRunDir(options_.run_dir, request->path(), "SaveCheckpoint path");
    if (!confined.ok()) return ToGrpcStatus(confined.status());
    path = *confined;
  }
  auto r = Save(path);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = *r;
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::LoadCheckpoint(grpc::ServerContext* context,
                                                    const v1::CheckpointRequest* request,
                                                    v1::CheckpointReply* reply) {
  absl::StatusOr<v1::CheckpointReply> r;
  if (request->from_worker().empty()) {
    if (request->path().empty()) {
      return ToGrpcStatus(absl::InvalidArgumentError("LoadCheckpoint needs a path"));
    }
    auto confined = ResolveInRunDir(options_.run_dir, request->path(), "LoadCheckpoint path");
    r = confined.ok() ? Load(*confined, options_.run_dir) : confined.status();
  } else {
    r = LoadFromWorker(request->from_worker(), request->from_worker_step(), context->deadline());
  }
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = *r;
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Stop(grpc::ServerContext*, const v1::StopRequest* request,
                                          v1::StopReply*) {
  spdlog::info("Stop requested: {}", request->reason().empty() ? "(no reason)" : request->reason());
  if (options_.on_stop) options_.on_stop(request->reason());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::DataPlane(grpc::ServerContext*,
                                               const v1::DataPlaneRequest* request,
                                               v1::DataPlaneOffer* reply) {
  if (options_.data_plane == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this parameter server has no plain-TCP data plane (TLS is on, its job says "
        "strategy.ps_link: grpc, or it could not listen): use PushPull"));
  }
  if (request->sender() >= static_cast<uint32_t>(partition_->config().workers)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("data plane for worker ", request->sender(), ": this job has workers 0..",
                     partition_->config().workers - 1)));
  }
  reply->set_port(static_cast<uint32_t>(options_.data_plane->port()));
  // Worker `sender`'s own ticket: its connection's requests must then all name that worker.
  const tcp::Ticket& ticket = options_.data_plane->ticket(static_cast<int>(request->sender()));
  reply->set_ticket(ticket.data(), ticket.size());
  return grpc::Status::OK;
}

}  // namespace strata
