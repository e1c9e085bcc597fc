#include "orchestrator/run/grpc_cluster_client.h"

#include <atomic>
#include <functional>
#include <thread>

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "services/common/base/status.h"
#include "services/common/wire/handover_fetch.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/evaluator.grpc.pb.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

// A blocking unary call on a thread of its own. The context outlives the thread (joined in the
// destructor, after a cancel that makes the call return at once).
template <typename Reply>
class ThreadedReply final : public PendingReply<Reply> {
 public:
  using Call = std::function<grpc::Status(grpc::ClientContext*, Reply*)>;

  ThreadedReply(Call call, std::chrono::milliseconds timeout, std::string what) {
    context_.set_deadline(DeadlineAfter(timeout));
    thread_ = std::thread([this, call = std::move(call), what = std::move(what)] {
      Reply reply;
      grpc::Status s = call(&context_, &reply);
      if (s.ok()) {
        result_ = std::move(reply);
      } else {
        result_ = FromGrpcStatus(s, what);
      }
      done_.store(true);
    });
  }
  ~ThreadedReply() override {
    context_.TryCancel();
    thread_.join();
  }

  bool done() const override { return done_.load(); }
  const absl::StatusOr<Reply>& result() const override { return result_; }
  void Cancel() override { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::atomic<bool> done_{false};
  absl::StatusOr<Reply> result_ = absl::UnknownError("not sent");
  std::thread thread_;
};

absl::Status Bare(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

class GrpcClusterClient final : public ClusterClient {
 public:
  explicit GrpcClusterClient(const ClusterAddresses& addresses) : addresses_(addresses) {
    for (const std::string& a : addresses.workers)
      workers_.push_back(v1::Worker::NewStub(MakeChannel(a)));
    for (const std::string& a : addresses.servers)
      servers_.push_back(v1::ParameterServer::NewStub(MakeChannel(a)));
    if (!addresses.evaluator.empty())
      evaluator_ = v1::Evaluator::NewStub(MakeChannel(addresses.evaluator));
  }

  int worker_count() const override { return static_cast<int>(workers_.size()); }
  int server_count() const override { return static_cast<int>(servers_.size()); }

  absl::Status StartWorker(int rank, const v1::StartRequest& request, Timeout timeout) override {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::StartReply reply;
    return FromGrpcStatus(workers_[rank]->Start(&context, request, &reply),
                          absl::StrCat("Start of worker ", rank, " at ", addresses_.workers[rank]));
  }

  absl::Status ReformRing(int rank, const v1::ReformRingRequest& request,
                          Timeout timeout) override {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::ReformRingReply reply;
    return FromGrpcStatus(
        workers_[rank]->ReformRing(&context, request, &reply),
        absl::StrCat("ReformRing of worker ", rank, " at ", addresses_.workers[rank]));
  }

  absl::StatusOr<v1::WorkerStatus> GetWorkerStatus(int rank, Timeout timeout) override {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::WorkerStatus status;
    grpc::Status s = workers_[rank]->GetStatus(&context, v1::WorkerStatusRequest(), &status);
    if (!s.ok()) return Bare(s);
    return status;
  }

  absl::StatusOr<v1::ServerStatus> GetServerStatus(int server, Timeout timeout) override {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::ServerStatus status;
    grpc::Status s = servers_[server]->GetStatus(&context, v1::ServerStatusRequest(), &status);
    if (!s.ok()) return Bare(s);
    return status;
  }

  std::unique_ptr<PendingReply<v1::SwitchReply>> BeginSwitch(int rank,
                                                             const v1::SwitchRequest& request,
                                                             Timeout timeout) override {
    v1::Worker::Stub* stub = workers_[rank].get();
    return std::make_unique<ThreadedReply<v1::SwitchReply>>(
        [stub, request](grpc::ClientContext* c, v1::SwitchReply* r) {
          return stub->Switch(c, request, r);
        },
        timeout, absl::StrCat("Switch of worker ", rank, " at ", addresses_.workers[rank]));
  }

  std::unique_ptr<PendingReply<v1::CheckpointReply>> BeginLoadCheckpoint(
      int server, const v1::CheckpointRequest& request, Timeout timeout) override {
    v1::ParameterServer::Stub* stub = servers_[server].get();
    return std::make_unique<ThreadedReply<v1::CheckpointReply>>(
        [stub, request](grpc::ClientContext* c, v1::CheckpointReply* r) {
          return stub->LoadCheckpoint(c, request, r);
        },
        timeout,
        absl::StrCat("LoadCheckpoint on parameter server ", server, " at ",
                     addresses_.servers[server]));
  }

  std::string WorkerAddress(int rank) const override { return addresses_.workers[rank]; }

  absl::StatusOr<Checkpoint> ReadHandoverModel(int rank, int64_t step, Timeout timeout) override {
    HandoverFetchOptions fetch;
    fetch.deadline = DeadlineAfter(timeout);
    return FetchHandoverModel(addresses_.workers[rank], step, fetch);
  }

  absl::StatusOr<ServerModelRead> ReadServerModel(int server, Timeout timeout) override {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::PullRequest pull;
    pull.set_worker(-1);  // an observer: never waits on consistency rules
    auto reader = servers_[server]->Pull(&context, pull);
    ServerModelRead read;
    std::vector<v1::TensorChunk> chunks;
    v1::PullResponse response;
    while (reader->Read(&response)) {
      if (response.has_header()) read.header_versions.push_back(response.header().version());
      if (response.has_chunk()) chunks.push_back(response.chunk());
    }
    if (grpc::Status s = reader->Finish(); !s.ok()) return Bare(s);
    auto tensors = DecodeAll(chunks);
    if (!tensors.ok()) return tensors.status();
    read.tensors = std::move(*tensors);
    return read;
  }

  std::unique_ptr<PendingReply<v1::EvalMetrics>> BeginEvaluate(
      const v1::EvaluateModelRequest& request, Timeout timeout) override {
    v1::Evaluator::Stub* stub = evaluator_.get();
    const bool wait = addresses_.wait_for_evaluator;
    return std::make_unique<ThreadedReply<v1::EvalMetrics>>(
        [stub, request, wait](grpc::ClientContext* c, v1::EvalMetrics* r) {
          // An evaluator slow to answer the connection (a loaded machine, a stopped process)
          // is waited for up to the evaluation's deadline (ClusterAddresses).
          c->set_wait_for_ready(wait);
          return stub->Evaluate(c, request, r);
        },
        timeout, absl::StrCat("evaluation of epoch ", request.epoch()));
  }

  void StopWorker(int rank, const std::string& reason, Timeout timeout) override {
    Stop(*workers_[rank], reason, timeout);
  }
  void StopServer(int server, const std::string& reason, Timeout timeout) override {
    Stop(*servers_[server], reason, timeout);
  }
  void StopEvaluator(const std::string& reason, Timeout timeout) override {
    if (evaluator_) Stop(*evaluator_, reason, timeout);
  }

 private:
  template <typename Stub>
  static void Stop(Stub& stub, const std::string& reason, Timeout timeout) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    v1::StopRequest stop;
    stop.set_reason(reason);
    v1::StopReply reply;
    stub.Stop(&context, stop, &reply);  // best effort: signals follow for whatever stays
  }

  ClusterAddresses addresses_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> workers_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> servers_;
  std::unique_ptr<v1::Evaluator::Stub> evaluator_;
};

}  // namespace

std::unique_ptr<ClusterClient> MakeGrpcClusterClient(const ClusterAddresses& addresses) {
  return std::make_unique<GrpcClusterClient>(addresses);
}

}  // namespace strata
