// The state the worker's RPC threads and its training thread share, and the Worker control
// service that reads and changes it. The training thread owns the Trainer: RPCs that need the
// model post a task (WorkerState::Post) and wait for the next step boundary, so they see a
// consistent model and never race the optimizer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "services/common/ml/trainer.h"
#include "services/worker/switch_participant.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {

// Work handed to the training thread; runs at the next step boundary (or at once when idle).
using Task = std::function<void(Trainer&)>;

// The model at the end of one epoch of the all-reduce phase, for GetModel with an epoch.
struct EpochModel {
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<NamedTensor>> tensors;
};

class WorkerState {
 public:
  // Everything the RPC threads may read or request, behind one lock.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<v1::StartRequest> start;
  // The switch handshake. It has its own lock, which may be taken while holding `mu`, never the
  // other way round.
  SwitchParticipant switch_participant;
  std::deque<Task> tasks;
  bool stop = false;
  v1::WorkerStatus status;
  // The model of the switch step in the checkpoint format, served by GetHandoverModel from the RPC
  // threads while the training thread waits for the servers to load it (status.handover_model_step
  // says which step it is).
  std::shared_ptr<const std::string> handover_model;
  // The new ring a ReformRing brought, for the training thread, which waits for it while the
  // status says ring_broken.
  std::optional<v1::ReformRingRequest> reform;
  // The models of the last kHeldEpochModels epochs ended in all-reduce, oldest first: the
  // evaluator scores epoch E on the model of epoch E even when training has moved on by the time
  // its request arrives, so the losses the switch rule reads do not depend on timing.
  static constexpr size_t kHeldEpochModels = 3;
  std::deque<EpochModel> epoch_models;

  // Called by the training thread after the step that ended `epoch` in all-reduce, before the
  // step is published (a request for the epoch then finds its model).
  void KeepEpochModel(int64_t epoch, const Trainer& trainer) {
    auto tensors = std::make_shared<const std::vector<NamedTensor>>(trainer.ModelTensors());
    {
      std::lock_guard<std::mutex> lock(mu);
      epoch_models.push_back({epoch, std::move(tensors)});
      while (epoch_models.size() > kHeldEpochModels) epoch_models.pop_front();
    }
    cv.notify_all();
  }

  void Post(Task task) {
    {
      std::lock_guard<std::mutex> lock(mu);
      tasks.push_back(std::move(task));
    }
    cv.notify_all();
  }

  // Runs the posted tasks on the calling (training) thread.
  void RunTasks(Trainer& trainer) {
    std::deque<Task> run;
    {
      std::lock_guard<std::mutex> lock(mu);
      run.swap(tasks);
    }
    for (Task& t : run) t(trainer);
  }

  bool stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stop;
  }
};

// The Worker service (docs/protocol.md): Start, GetStatus, Stop, Switch, SaveCheckpoint,
// GetModel, GetHandoverModel, ReformRing.
class WorkerService final : public v1::Worker::Service {
 public:
  // `world` bounds Start's worker list; `run_dir` confines SaveCheckpoint's path;
  // `interrupt_ring` makes the ring give up at once (a Switch or ReformRing naming a lost peer).
  WorkerService(WorkerState* state, int world, std::string run_dir,
                std::function<void(const std::string&)> interrupt_ring)
      : state_(state),
        world_(world),
        run_dir_(std::move(run_dir)),
        interrupt_ring_(std::move(interrupt_ring)) {}

  grpc::Status Start(grpc::ServerContext*, const v1::StartRequest* request,
                     v1::StartReply*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::WorkerStatusRequest*,
                         v1::WorkerStatus* reply) override;
  grpc::Status Stop(grpc::ServerContext*, const v1::StopRequest* request, v1::StopReply*) override;
  grpc::Status Switch(grpc::ServerContext* context, const v1::SwitchRequest* request,
                      v1::SwitchReply* reply) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext* context, const v1::CheckpointRequest* request,
                              v1::CheckpointReply* reply) override;
  grpc::Status GetModel(grpc::ServerContext* context, const v1::ModelRequest*,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;
  grpc::Status GetHandoverModel(grpc::ServerContext*, const v1::HandoverModelRequest* request,
                                grpc::ServerWriter<v1::CheckpointChunk>* writer) override;
  grpc::Status ReformRing(grpc::ServerContext*, const v1::ReformRingRequest* request,
                          v1::ReformRingReply*) override;

 private:
  WorkerState* state_;
  const int world_;
  const std::string run_dir_;
  const std::function<void(const std::string&)> interrupt_ring_;
};

}  // namespace strata
