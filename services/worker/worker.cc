#include "services/worker/worker.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>

#include "services/common/checkpoint.h"
#include "services/common/dataset.h"
#include "services/common/files.h"
#include "services/common/rpc.h"
#include "services/common/run_paths.h"
#include "services/common/sgd.h"
#include "services/common/shard_index.h"
#include "services/common/status.h"
#include "services/common/tensor_codec.h"
#include "services/common/trainer.h"
#include "services/worker/allreduce_sync.h"
#include "services/worker/push_pull_sync.h"
#include "services/worker/ring_allreduce.h"
#include "services/worker/switch_participant.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// Work handed to the training thread; runs at the next step boundary (or at once when idle).
using Task = std::function<void(Trainer&)>;

std::string ModeName(v1::SyncMode mode) { return mode == v1::SYNC_MODE_PS ? "ps" : "allreduce"; }

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

class WorkerService final : public v1::Worker::Service {
 public:
  // `world` bounds Start's worker list; `run_dir` confines SaveCheckpoint's path.
  WorkerService(WorkerState* state, int world, std::string run_dir)
      : state_(state), world_(world), run_dir_(std::move(run_dir)) {}

  grpc::Status Start(grpc::ServerContext*, const v1::StartRequest* request,
                     v1::StartReply*) override {
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
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "Start names ", request->workers_size(), " workers, this worker has --world ", world_)));
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->start) return ToGrpcStatus(absl::FailedPreconditionError("already started"));
      if (request->mode() == v1::SYNC_MODE_ALLREDUCE && request->workers_size() < 1) {
        return ToGrpcStatus(absl::InvalidArgumentError("Start: workers list is empty"));
      }
      state_->start = *request;
    }
    state_->cv.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext*, const v1::WorkerStatusRequest*,
                         v1::WorkerStatus* reply) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    *reply = state_->status;
    return grpc::Status::OK;
  }

  grpc::Status Stop(grpc::ServerContext*, const v1::StopRequest* request, v1::StopReply*) override {
    spdlog::info("stop requested: {}", request->reason());
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Switch(grpc::ServerContext* context, const v1::SwitchRequest* request,
                      v1::SwitchReply* reply) override {
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
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "Switch: lr ", request->lr(), " is above the limit of ", kMaxLearningRate)));
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

  grpc::Status SaveCheckpoint(grpc::ServerContext* context, const v1::CheckpointRequest* request,
                              v1::CheckpointReply* reply) override {
    if (request->path().empty())
      return ToGrpcStatus(absl::InvalidArgumentError("SaveCheckpoint: empty path"));
    // A caller's path may only name a file of this run (services/common/run_paths.h).
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
          STRATA_RETURN_IF_ERROR(WriteCheckpoint(path, c));
          return step;
        });
    if (!saved.ok()) return ToGrpcStatus(saved.status());
    reply->set_path(path);
    reply->set_version(*saved);
    return grpc::Status::OK;
  }

  grpc::Status GetModel(grpc::ServerContext* context, const v1::ModelRequest*,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override {
    auto model = OnTrainingThread<std::vector<NamedTensor>>(
        *state_, context, [](Trainer& trainer) -> absl::StatusOr<std::vector<NamedTensor>> {
          std::vector<NamedTensor> tensors;
          const float* params = trainer.parameter_data();
          for (const FlatEntry& e : trainer.parameters().entries()) {
            NamedTensor t = NamedTensor::Zeros(e.spec);
            std::memcpy(t.data.data(), params + e.offset, e.numel * sizeof(float));
            tensors.push_back(std::move(t));
          }
          std::vector<float> buffers(trainer.buffers().total_floats());
          trainer.CopyBuffersTo(buffers.data());
          for (const FlatEntry& e : trainer.buffers().entries()) {
            NamedTensor t = NamedTensor::Zeros(e.spec);
            std::memcpy(t.data.data(), buffers.data() + e.offset, e.numel * sizeof(float));
            tensors.push_back(std::move(t));
          }
          return tensors;
        });
    if (!model.ok()) return ToGrpcStatus(model.status());
    for (const NamedTensor& t : *model) {
      absl::Status s = EncodeTensor({&t.spec, t.data.data()}, {},
                                    [&](const v1::TensorChunk& c) { return writer->Write(c); });
      if (!s.ok()) return ToGrpcStatus(s);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetHandoverModel(grpc::ServerContext*, const v1::HandoverModelRequest* request,
                                grpc::ServerWriter<v1::CheckpointChunk>* writer) override {
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

 private:
  WorkerState* state_;
  const int world_;
  const std::string run_dir_;
};

class WorkerRunner {
 public:
  WorkerRunner(const WorkerOptions& options, WorkerState* state, RingAllReduce* ring)
      : options_(options), state_(state), ring_(ring) {}

  // Waits for Start, trains, then serves model requests until Stop.
  void Run(Trainer& trainer) {
    if (WaitForStart(trainer)) {
      absl::Status status = Train(trainer);
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!status.ok()) {
        spdlog::error("training stopped: {}", std::string(status.message()));
        state_->status.set_error(std::string(status.message()));
      }
      state_->status.set_finished(true);
      state_->switch_participant.EndOfTraining(absl::AbortedError(
          status.ok() ? "training ended before the switch step" : std::string(status.message())));
    }
    // Keep serving GetModel / SaveCheckpoint until Stop.
    for (;;) {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [&] { return state_->stop || !state_->tasks.empty(); });
      if (state_->stop) break;
      lock.unlock();
      state_->RunTasks(trainer);
    }
    state_->RunTasks(trainer);  // answer what is still queued
  }

 private:
  bool WaitForStart(Trainer& trainer) {
    for (;;) {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock,
                      [&] { return state_->stop || state_->start || !state_->tasks.empty(); });
      if (state_->stop) return false;
      if (state_->start && state_->tasks.empty()) return true;
      lock.unlock();
      state_->RunTasks(trainer);
    }
  }

  absl::StatusOr<std::unique_ptr<Synchroniser>> MakePushPull(
      const google::protobuf::RepeatedPtrField<std::string>& servers, const Trainer& trainer,
      double lr = 0) {
    PushPullOptions o;
    o.servers.assign(servers.begin(), servers.end());
    o.rank = options_.rank;
    o.deadline = options_.deadline;
    o.lr = lr;
    o.pipeline = options_.spec.strategy.ps_pipeline > 0;
    return MakePushPullSynchroniser(o, trainer);
  }

  // Starts a synchroniser, retrying while the servers are still loading the handed-over model.
  absl::Status StartWithRetry(Synchroniser& sync, Trainer& trainer) {
    const auto give_up = Clock::now() + options_.deadline;
    for (;;) {
      absl::Status s = sync.Start(trainer);
      if (s.ok() ||
          (s.code() != absl::StatusCode::kFailedPrecondition &&
           s.code() != absl::StatusCode::kUnavailable) ||
          Clock::now() > give_up || state_->stopping()) {
        return s;
      }
      // Poll again soon: this back-off is most of the handover time (docs/benchmarks.md).
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  absl::StatusOr<v1::SwitchReply> DoSwitch(Trainer& trainer, const v1::SwitchRequest& request,
                                           int64_t epoch, int64_t step, int64_t steps_per_epoch,
                                           std::unique_ptr<Synchroniser>* sync) {
    const auto start = Clock::now();
    // The model as the ring left it, to check the handover against.
    const size_t n_params = trainer.parameters().total_floats();
    std::vector<float> before(trainer.parameter_data(), trainer.parameter_data() + n_params);
    std::vector<float> buffers_before(trainer.buffers().total_floats());
    trainer.CopyBuffersTo(buffers_before.data());
    // The handover model (docs/architecture.md, "The live switch"): every worker keeps it for
    // GetHandoverModel, from which the parameter servers load it over the network; all replicas
    // are equal, so any worker can serve it. Worker 0 also writes it to the run directory for the
    // record.
    Checkpoint checkpoint = trainer.ToCheckpoint(epoch, step, step);
    // The global progress so far, so the servers' epoch (samples / training-set size) and
    // learning-rate schedule continue mid-epoch instead of restarting at the epoch boundary.
    const double epochs_done = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
    checkpoint.extra["samples"] =
        static_cast<int64_t>(epochs_done * static_cast<double>(trainer.dataset().train.size()));
    STRATA_ASSIGN_OR_RETURN(std::string serialized, SerializeCheckpoint(checkpoint));
    auto model = std::make_shared<const std::string>(std::move(serialized));
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->handover_model = model;
      state_->status.set_handover_model_step(step);
    }
    if (options_.rank == 0) {
      STRATA_RETURN_IF_ERROR(MakeDirs(options_.run_dir + "/checkpoints"));
      const std::string path =
          absl::StrCat(options_.run_dir, "/checkpoints/switch-step", step, ".ckpt");
      STRATA_RETURN_IF_ERROR(WriteFileAtomic(path, *model));
      spdlog::info("switch: wrote {}", path);
    }
    STRATA_ASSIGN_OR_RETURN(auto next,
                            MakePushPull(request.parameter_servers(), trainer, request.lr()));
    STRATA_RETURN_IF_ERROR(StartWithRetry(*next, trainer));
    // Barrier over the ring, which is still connected: no worker pushes before every worker has
    // pulled, so all of them continue from the handed-over model itself
    // rather than from one already moved by a faster peer.
    float barrier = 0.0f;
    AllReduceOptions barrier_options;
    barrier_options.deadline = options_.deadline;
    STRATA_RETURN_IF_ERROR(
        Annotate(ring_->AllReduceSum(&barrier, 1, barrier_options), "switch barrier"));
    *sync = std::move(next);
    double max_diff = 0;
    for (size_t i = 0; i < n_params; ++i) {
      max_diff = std::max(max_diff, double(std::fabs(trainer.parameter_data()[i] - before[i])));
    }
    std::vector<float> buffers_after(buffers_before.size());
    trainer.CopyBuffersTo(buffers_after.data());
    for (size_t i = 0; i < buffers_after.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(buffers_after[i] - buffers_before[i])));
    }
    v1::SwitchReply reply;
    reply.set_switched_at_step(step);
    reply.set_epoch(epoch);
    reply.set_handover_max_abs_diff(max_diff);
    reply.set_handover_s(std::chrono::duration<double>(Clock::now() - start).count());
    spdlog::info(
        "switch: push/pull from step {} after {:.3f} s; pulled model differs by at most {}", step,
        reply.handover_s(), max_diff);
    return reply;
  }

  absl::Status Train(Trainer& trainer) {
    v1::StartRequest start;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      start = *state_->start;
      state_->status.set_mode(start.mode());
    }
    std::unique_ptr<Synchroniser> sync;
    if (start.mode() == v1::SYNC_MODE_ALLREDUCE) {
      std::vector<std::string> peers(start.workers().begin(), start.workers().end());
      if (static_cast<int>(peers.size()) != options_.world) {
        return absl::InvalidArgumentError(
            absl::StrCat("Start names ", peers.size(), " workers, --world is ", options_.world));
      }
      STRATA_RETURN_IF_ERROR(ring_->Connect(peers));
      AllReduceOptions ar;
      ar.deadline = options_.deadline;
      STRATA_ASSIGN_OR_RETURN(sync, MakeAllReduceSynchroniser(ring_, ar));
    } else {
      STRATA_ASSIGN_OR_RETURN(sync, MakePushPull(start.parameter_servers(), trainer));
    }
    STRATA_RETURN_IF_ERROR(StartWithRetry(*sync, trainer));

    int64_t steps_per_epoch = trainer.batches_per_epoch();
    if (start.steps_per_epoch() > 0)
      steps_per_epoch = std::min(steps_per_epoch, start.steps_per_epoch());
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->status.set_steps_per_epoch(steps_per_epoch);
    }
    spdlog::info("training: mode {}, {} examples, {} steps per epoch, {} epochs",
                 ModeName(start.mode()), trainer.shard_size(), steps_per_epoch,
                 options_.spec.training.epochs);
    int64_t step = 0;
    auto phase_start = Clock::now();
    int64_t phase_samples = 0;
    // Under parameter servers with a sample budget the job ends when the servers say the budget
    // is spent, not after this worker's epochs: a fast worker keeps cycling its shard while a
    // slow one is still at it, as with TensorFlow's global step. The cap only guards against
    // servers that never report (a lone worker needs about `world` times its epochs).
    const int64_t epochs = options_.spec.training.epochs;
    const int64_t epoch_cap = 2 * epochs * std::max(options_.world, 1) + 1;
    StepOutcome outcome;
    for (int64_t epoch = 0; !outcome.budget_spent &&
                            (epoch < epochs || (outcome.has_budget && epoch < epoch_cap));
         ++epoch) {
      trainer.StartEpoch(epoch);
      double loss_sum = 0;
      int64_t seen = 0;
      for (int64_t b = 0; b < steps_per_epoch && !outcome.budget_spent; ++b) {
        state_->RunTasks(trainer);
        if (state_->stopping()) return absl::CancelledError("stopped");
        STRATA_ASSIGN_OR_RETURN(StepStats stats, trainer.ComputeGradients(b));
        StepContext context{epoch, step, stats.examples};
        // Vote to switch after this step if a request is due; once voted it cannot be withdrawn
        // until the vote's outcome is known.
        context.ready_to_switch = state_->switch_participant.VoteForStep(step + 1);
        STRATA_ASSIGN_OR_RETURN(outcome, sync->Step(trainer, context));
        ++step;
        loss_sum += stats.loss * stats.examples;
        seen += stats.examples;
        phase_samples += stats.examples;
        const std::optional<v1::SwitchRequest> switch_now = state_->switch_participant.SettleStep(
            context.ready_to_switch, outcome.all_ready_to_switch);
        {
          std::lock_guard<std::mutex> lock(state_->mu);
          state_->status.set_step(step);
          state_->status.set_train_loss(loss_sum / seen);
          const double secs = std::chrono::duration<double>(Clock::now() - phase_start).count();
          state_->status.set_samples_per_s(phase_samples / std::max(secs, 1e-9));
          if (switch_now) state_->status.set_switch_began_at_step(step);
        }
        if (switch_now) {
          auto reply = DoSwitch(trainer, *switch_now, epoch, step, steps_per_epoch, &sync);
          {
            std::lock_guard<std::mutex> lock(state_->mu);
            if (reply.ok()) {
              state_->status.set_mode(v1::SYNC_MODE_PS);
              state_->status.set_switched_at_step(step);
            }
          }
          state_->switch_participant.Finish(reply);
          if (!reply.ok()) return Annotate(reply.status(), "switch");
          phase_start = Clock::now();
          phase_samples = 0;
        }
      }
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->status.set_epoch(epoch + 1);
      state_->status.add_epoch_train_loss(loss_sum / std::max<int64_t>(seen, 1));
    }
    STRATA_RETURN_IF_ERROR(sync->Drain(trainer));
    if (outcome.has_budget && !outcome.budget_spent) {
      spdlog::warn("stopped after {} passes over the shard without the servers reporting the "
                   "sample budget spent",
                   epoch_cap);
    }
    return absl::OkStatus();
  }

  const WorkerOptions& options_;
  WorkerState* state_;
  RingAllReduce* ring_;
};

absl::StatusOr<std::vector<int64_t>> LoadShard(const WorkerOptions& options, size_t train_size) {
  if (!options.shard_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(auto shard, ReadShardIndex(options.shard_file));
    for (int64_t e : shard) {
      if (e < 0 || static_cast<size_t>(e) >= train_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            options.shard_file, ": example ", e, " outside the training split of ", train_size));
      }
    }
    if (shard.empty())
      return absl::InvalidArgumentError(absl::StrCat(options.shard_file, ": empty shard"));
    return shard;
  }
  // Without a shard plan: every world-th example (what `mod` sharding gives).
  std::vector<int64_t> shard;
  for (size_t e = static_cast<size_t>(options.rank); e < train_size; e += options.world) {
    shard.push_back(static_cast<int64_t>(e));
  }
  return shard;
}

}  // namespace

absl::Status RunWorker(const WorkerOptions& options) {
  const JobSpec& spec = options.spec;
  STRATA_ASSIGN_OR_RETURN(Dataset dataset,
                          LoadDataset(DatasetOptionsFor(spec.dataset, spec.training.seed)));
  auto shared = std::make_shared<const Dataset>(std::move(dataset));

  TrainerOptions trainer_options = TrainerOptions::FromJobSpec(spec);
  trainer_options.batch_size = std::max(1, spec.training.batch_size / options.world);
  trainer_options.threads = spec.cluster.threads_per_worker;
  STRATA_ASSIGN_OR_RETURN(trainer_options.shard, LoadShard(options, shared->train.size()));
  ConfigureTorchThreads(trainer_options.threads);
  // Every replica starts from the same weights: the model seed is the job's, not the rank's; the
  // data order differs because the shards differ.
  STRATA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(trainer_options, shared));

  WorkerState state;
  state.status.set_rank(options.rank);
  state.status.set_mode(v1::SYNC_MODE_UNSPECIFIED);
  RingAllReduce ring(options.rank);
  WorkerService service(&state, options.world, options.run_dir);
  int port = 0;
  std::vector<std::string> also_listen;
  if (!options.ring_listen.empty()) also_listen.push_back(options.ring_listen);
  std::unique_ptr<grpc::Server> server =
      StartServer(options.listen, {&service, ring.service()}, &port, also_listen);
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               options.ring_listen.empty() ? "" : " and ",
                                               options.ring_listen));
  }
  if (!options.port_file.empty()) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(options.port_file, std::to_string(port) + "\n"));
  }
  spdlog::info("worker {}/{} serving on port {} ({} examples in shard, batch {})", options.rank,
               options.world, port, trainer->shard_size(), trainer_options.batch_size);

  WorkerRunner runner(options, &state, &ring);
  runner.Run(*trainer);
  server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
  return absl::OkStatus();
}

}  // namespace strata
