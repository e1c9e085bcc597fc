// A ClusterClient that answers as the test scripts it, with no process or socket: worker statuses
// are set directly, Switch / LoadCheckpoint / Evaluate calls stay pending until the test completes
// them, and every call is counted so tests can check what the orchestrator asked for.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchestrator/run/cluster_client.h"

namespace strata::testing {

// The fake's side of one pending call: the test completes it, the controller polls it.
template <typename Reply>
struct FakeCall {
  bool done = false;
  bool cancelled = false;
  absl::StatusOr<Reply> result = absl::UnknownError("pending");

  void Answer(Reply reply) { done = true, result = std::move(reply); }
  void Refuse(absl::Status status) { done = true, result = std::move(status); }
};

template <typename Reply>
class FakePendingReply final : public PendingReply<Reply> {
 public:
  explicit FakePendingReply(std::shared_ptr<FakeCall<Reply>> call) : call_(std::move(call)) {}
  ~FakePendingReply() override { Cancel(); }
  bool done() const override { return call_->done; }
  const absl::StatusOr<Reply>& result() const override { return call_->result; }
  void Cancel() override {
    if (!call_->done) call_->cancelled = true;
  }

 private:
  std::shared_ptr<FakeCall<Reply>> call_;
};

class FakeClusterClient final : public ClusterClient {
 public:
  FakeClusterClient(int workers, int servers) : statuses(workers), server_models(servers) {}

  int worker_count() const override { return static_cast<int>(statuses.size()); }
  int server_count() const override { return static_cast<int>(server_models.size()); }

  absl::Status StartWorker(int rank, const v1::StartRequest& request, Timeout) override {
    start_requests.push_back({rank, request});
    if (!refuse_starts.ok()) return refuse_starts;
    return absl::OkStatus();
  }
  absl::Status ReformRing(int rank, const v1::ReformRingRequest& request, Timeout) override {
    reform_requests.push_back({rank, request});
    return refuse_reforms;
  }
  absl::StatusOr<v1::ServerStatus> GetServerStatus(int server, Timeout) override {
    if (server_statuses.empty()) return absl::UnavailableError("no server status scripted");
    return server_statuses[server];
  }
  absl::StatusOr<v1::WorkerStatus> GetWorkerStatus(int rank, Timeout) override {
    ++status_calls;
    if (!unreachable.empty() && unreachable[rank])
      return absl::UnavailableError("connection refused");
    return statuses[rank];
  }
  std::unique_ptr<PendingReply<v1::SwitchReply>> BeginSwitch(int rank,
                                                             const v1::SwitchRequest& request,
                                                             Timeout) override {
    switch_requests[rank] = request;
    switch_calls[rank] = std::make_shared<FakeCall<v1::SwitchReply>>();
    return std::make_unique<FakePendingReply<v1::SwitchReply>>(switch_calls[rank]);
  }
  std::unique_ptr<PendingReply<v1::CheckpointReply>> BeginLoadCheckpoint(
      int server, const v1::CheckpointRequest& request, Timeout) override {
    load_requests[server] = request;
    load_calls[server] = std::make_shared<FakeCall<v1::CheckpointReply>>();
    return std::make_unique<FakePendingReply<v1::CheckpointReply>>(load_calls[server]);
  }
  std::string WorkerAddress(int rank) const override {
    return "worker-" + std::to_string(rank) + ".test:7000";
  }
  absl::StatusOr<Checkpoint> ReadHandoverModel(int rank, int64_t step, Timeout) override {
    ++handover_reads;
    auto it = handover_models.find(step);
    if (rank != handover_rank || it == handover_models.end()) {
      return absl::FailedPreconditionError("no handover model of that step");
    }
    return it->second;
  }
  absl::StatusOr<ServerModelRead> ReadServerModel(int server, Timeout) override {
    ++read_backs;
    return server_models[server];
  }
  std::unique_ptr<PendingReply<v1::EvalMetrics>> BeginEvaluate(const v1::EvaluateModelRequest& r,
                                                               Timeout) override {
    eval_requests.push_back(r);
    eval_calls.push_back(std::make_shared<FakeCall<v1::EvalMetrics>>());
    if (answer_evaluations) {
      v1::EvalMetrics m;
      m.set_epoch(r.epoch());
      m.set_phase(r.phase());
      eval_calls.back()->Answer(m);
    }
    return std::make_unique<FakePendingReply<v1::EvalMetrics>>(eval_calls.back());
  }
  void StopWorker(int, const std::string&, Timeout) override {}
  void StopServer(int, const std::string&, Timeout) override {}
  void StopEvaluator(const std::string&, Timeout) override {}

  std::vector<v1::WorkerStatus> statuses;
  std::vector<v1::ServerStatus> server_statuses;  // empty: GetServerStatus fails
  std::vector<std::pair<int, v1::StartRequest>> start_requests;
  absl::Status refuse_starts = absl::OkStatus();  // what every StartWorker returns
  std::vector<std::pair<int, v1::ReformRingRequest>> reform_requests;
  absl::Status refuse_reforms = absl::OkStatus();  // what every ReformRing returns
  std::vector<bool> unreachable;
  std::vector<absl::StatusOr<ServerModelRead>> server_models;
  std::map<int64_t, Checkpoint> handover_models;  // worker handover_rank's, by step
  int handover_rank = 0;
  std::map<int, v1::SwitchRequest> switch_requests;
  std::map<int, std::shared_ptr<FakeCall<v1::SwitchReply>>> switch_calls;
  std::map<int, v1::CheckpointRequest> load_requests;
  std::map<int, std::shared_ptr<FakeCall<v1::CheckpointReply>>> load_calls;
  std::vector<v1::EvaluateModelRequest> eval_requests;
  std::vector<std::shared_ptr<FakeCall<v1::EvalMetrics>>> eval_calls;
  bool answer_evaluations = false;  // every evaluation succeeds at once
  int status_calls = 0;
  int read_backs = 0;
  int handover_reads = 0;
};

}  // namespace strata::testing
