#include "services/worker/training_loop.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/checkpoint.h"
#include "services/worker/switch_participant.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

std::string ModeName(v1::SyncMode mode) { return mode == v1::SYNC_MODE_PS ? "ps" : "allreduce"; }

}  // namespace

class TrainingLoop::Runner {
 public:
  Runner(const WorkerOptions& options, WorkerState* state, SynchroniserFactory* synchronisers,
         WorkerMetrics* metrics)
      : options_(options), state_(state), synchronisers_(synchronisers), metrics_(metrics) {}

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
    return synchronisers_->PushPull({servers.begin(), servers.end()}, trainer, lr);
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

  // After the ring broke: serves the RPCs' tasks until `take` yields the orchestrator's
  // instruction (a Switch for the fallback, a ReformRing for the new ring); after the worker's
  // deadline, the ring's error `why`, saying that no `what` came.
  template <typename T>
  absl::StatusOr<T> AwaitAfterBrokenRing(Trainer& trainer, const absl::Status& why,
                                         const char* what,
                                         const std::function<std::optional<T>()>& take) {
    const auto give_up = Clock::now() + options_.deadline;
    for (;;) {
      state_->RunTasks(trainer);
      if (state_->stopping()) return absl::CancelledError("stopped");
      if (std::optional<T> got = take()) return std::move(*got);
      if (Clock::now() > give_up) {
        return Annotate(why, absl::StrCat("the ring broke and no ", what, " came within ",
                                          options_.deadline.count() / 1000, " s"));
      }
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait_for(lock, std::chrono::milliseconds(50));
    }
  }

  // Serializes the model of `step` and serves it through GetHandoverModel from now on.
  absl::StatusOr<std::shared_ptr<const std::string>> KeepHandoverModel(Trainer& trainer,
                                                                       int64_t epoch, int64_t step,
                                                                       int64_t steps_per_epoch) {
    Checkpoint checkpoint = trainer.ToCheckpoint(epoch, step, step);
    // The global progress so far, so the servers' epoch (samples / training-set size) and
    // learning-rate schedule continue mid-epoch instead of restarting at the epoch boundary.
    const double epochs_done = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
    checkpoint.extra["samples"] =
        static_cast<int64_t>(epochs_done * static_cast<double>(trainer.dataset().train.size()));
    STRATA_ASSIGN_OR_RETURN(std::string serialized, SerializeCheckpoint(checkpoint));
    auto model = std::make_shared<const std::string>(std::move(serialized));
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->handover_model = model;
    state_->status.set_handover_model_step(step);
    return model;
  }

  // The ring broke under this worker at `step` (a peer died; `why` is the ring's error). In a
  // switch job the orchestrator hands one survivor's model to the parameter servers and sends
  // every survivor Switch; each then goes on with push/pull from the servers' model, without the
  // ring's vote or barrier (docs/user-guide.md, "When a process dies"). The step that failed is
  // lost. Without a Switch within the deadline the ring's error stands.
  absl::StatusOr<std::unique_ptr<Synchroniser>> FallBackToServers(Trainer& trainer,
                                                                  const absl::Status& why,
                                                                  int64_t epoch, int64_t step,
                                                                  int64_t steps_per_epoch) {
    spdlog::warn(
        "the ring broke after step {}: {}; holding the model of step {} for the "
        "parameter servers",
        step, std::string(why.message()), step);
    STRATA_RETURN_IF_ERROR(KeepHandoverModel(trainer, epoch, step, steps_per_epoch).status());
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->status.set_ring_broken(std::string(why.message()));
      state_->status.set_switch_began_at_step(step);
    }
    auto request = AwaitAfterBrokenRing<v1::SwitchRequest>(
        trainer, why, "Switch", [&]() -> std::optional<v1::SwitchRequest> {
          // Due at once (the orchestrator asks for step 0); no ring to vote over. A worker that
          // had voted in the step that broke (a request that woke it from the at_fraction hold
          // just before a peer died) carries that vote.
          if (state_->switch_participant.state() != SwitchState::kVoted &&
              !state_->switch_participant.VoteForStep(step + 1)) {
            return std::nullopt;
          }
          return state_->switch_participant.SettleStep(true, true);
        });
    if (!request.ok()) return request.status();
    const auto start = Clock::now();
    auto resumed = [&]() -> absl::StatusOr<std::unique_ptr<Synchroniser>> {
      STRATA_ASSIGN_OR_RETURN(auto next,
                              MakePushPull(request->parameter_servers(), trainer, request->lr()));
      STRATA_RETURN_IF_ERROR(StartWithRetry(*next, trainer));
      return next;
    }();
    v1::SwitchReply reply;
    reply.set_switched_at_step(step);
    reply.set_epoch(epoch);
    reply.set_handover_s(std::chrono::duration<double>(Clock::now() - start).count());
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (resumed.ok()) {
        state_->status.set_mode(v1::SYNC_MODE_PS);
        state_->status.set_switched_at_step(step);
        state_->status.clear_ring_broken();
      }
    }
    if (resumed.ok() && metrics_ != nullptr) metrics_->Phase(v1::SYNC_MODE_PS, true);
    state_->switch_participant.Finish(resumed.ok() ? Outcome(reply) : Outcome(resumed.status()));
    if (resumed.ok()) spdlog::info("push/pull from step {} after the ring broke", step);
    return resumed;
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
    STRATA_ASSIGN_OR_RETURN(auto model, KeepHandoverModel(trainer, epoch, step, steps_per_epoch));
    if (options_.rank == 0) {
      const std::string path =
          absl::StrCat(options_.run_dir, "/", run_files::SwitchCheckpoint(step));
      FileAccessOptions confined;
      confined.beneath = options_.run_dir;
      STRATA_RETURN_IF_ERROR(WriteFileAtomic(path, *model, confined));
      spdlog::info("switch: wrote {}", path);
    }
    STRATA_ASSIGN_OR_RETURN(auto next,
                            MakePushPull(request.parameter_servers(), trainer, request.lr()));
    STRATA_RETURN_IF_ERROR(StartWithRetry(*next, trainer));
    // Barrier over the ring, which is still connected: no worker pushes before every worker has
    // pulled, so all of them continue from the handed-over model itself
    // rather than from one already moved by a faster peer.
    STRATA_RETURN_IF_ERROR(Annotate(synchronisers_->RingBarrier(), "switch barrier"));
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

  // The synchroniser Start asks for: the ring (connected to every peer) or push/pull, and the
  // model a resumed run starts from.
  absl::StatusOr<std::unique_ptr<Synchroniser>> FirstSynchroniser(const v1::StartRequest& start,
                                                                  Trainer& trainer) {
    if (!start.init_checkpoint().empty()) {
      STRATA_RETURN_IF_ERROR(LoadInitCheckpoint(start, trainer));
    }
    std::unique_ptr<Synchroniser> sync;
    if (start.mode() == v1::SYNC_MODE_ALLREDUCE) {
      std::vector<std::string> peers(start.workers().begin(), start.workers().end());
      if (static_cast<int>(peers.size()) != options_.world()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Start names ", peers.size(), " workers, the job has ", options_.world()));
      }
      // A replacement joins a re-formed ring: its generation, and the model of the survivor
      // that completed the most steps (AwaitNewRing on the survivors).
      STRATA_RETURN_IF_ERROR(synchronisers_->ConnectRing(peers, start.ring_generation()));
      if (start.ring_generation() > 0) {
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->status.set_ring_generation(start.ring_generation());
      }
      STRATA_ASSIGN_OR_RETURN(sync, synchronisers_->AllReduce(start.ring_source_rank()));
    } else {
      STRATA_ASSIGN_OR_RETURN(sync, MakePushPull(start.parameter_servers(), trainer));
    }
    STRATA_RETURN_IF_ERROR(StartWithRetry(*sync, trainer));
    return sync;
  }

  // Every worker runs as many steps per epoch as the smallest shard allows (ring steps line up).
  int64_t AgreedStepsPerEpoch(const v1::StartRequest& start, const Trainer& trainer) {
    int64_t steps_per_epoch = trainer.batches_per_epoch();
    if (start.steps_per_epoch() > 0)
      steps_per_epoch = std::min(steps_per_epoch, start.steps_per_epoch());
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->status.set_steps_per_epoch(steps_per_epoch);
    return steps_per_epoch;
  }

  // The switch the ring agreed on after this step; the worker then trains against the servers.
  absl::Status SwitchAfter(Trainer& trainer, const v1::SwitchRequest& request, int64_t epoch,
                           int64_t step, int64_t steps_per_epoch,
                           std::unique_ptr<Synchroniser>* sync) {
    auto reply = DoSwitch(trainer, request, epoch, step, steps_per_epoch, sync);
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (reply.ok()) {
        state_->status.set_mode(v1::SYNC_MODE_PS);
        state_->status.set_switched_at_step(step);
      }
    }
    if (reply.ok() && metrics_ != nullptr) metrics_->Phase(v1::SYNC_MODE_PS, true);
    state_->switch_participant.Finish(reply);
    return reply.ok() ? absl::OkStatus() : Annotate(reply.status(), "switch");
  }

  // A resumed run (`strata resume`): every worker takes the model, buffers and momentum of the
  // step it goes on from, from the checkpoint rank 0 saved (MaybeSaveRingCheckpoint) or the
  // orchestrator chose.
  absl::Status LoadInitCheckpoint(const v1::StartRequest& start, Trainer& trainer) {
    STRATA_ASSIGN_OR_RETURN(
        const std::string path,
        ResolveInRunDir(options_.run_dir, start.init_checkpoint(), "Start init_checkpoint"));
    STRATA_ASSIGN_OR_RETURN(const Checkpoint checkpoint, ReadCheckpoint(path, options_.run_dir));
    if (checkpoint.step != start.first_step()) {
      return absl::InvalidArgumentError(absl::StrCat("Start: init_checkpoint ", path,
                                                     " holds step ", checkpoint.step,
                                                     ", but first_step is ", start.first_step()));
    }
    STRATA_RETURN_IF_ERROR(Annotate(trainer.LoadCheckpoint(checkpoint), path));
    spdlog::info("resuming from {} at step {}", path, checkpoint.step);
    return absl::OkStatus();
  }

  // Rank 0 of a ring saves the model of the step it completed, now and then: the replicas are
  // identical at a step boundary, so this one file is the whole ring's state. Written on the
  // training thread (a few milliseconds every WorkerOptions::ring_checkpoint_every) and replaced
  // atomically, so a reader never sees half of it.
  void MaybeSaveRingCheckpoint(Trainer& trainer, int64_t step, int64_t steps_per_epoch) {
    if (options_.rank != 0 || options_.ring_checkpoint_every.count() <= 0) return;
    const auto now = Clock::now();
    if (now < next_ring_checkpoint_) return;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->status.mode() != v1::SYNC_MODE_ALLREDUCE) return;
    }
    next_ring_checkpoint_ = now + options_.ring_checkpoint_every;
    const std::string path = absl::StrCat(options_.run_dir, "/", run_files::kRingCheckpoint);
    absl::Status s = WriteCheckpoint(path, trainer.ToCheckpoint(step / steps_per_epoch, step, step),
                                     options_.run_dir);
    if (!s.ok())
      spdlog::warn("ring checkpoint at step {} failed: {}", step, std::string(s.message()));
  }

  // A restarted worker carries on the count of the one it replaces (StartRequest.first_step),
  // from the batch of its epoch where that one stopped; 0 for a fresh start.
  int64_t FirstStep(const v1::StartRequest& start, int64_t steps_per_epoch) {
    const int64_t step = start.first_step();
    if (step > 0) {
      spdlog::info("rejoining at step {} (epoch {}, batch {})", step, step / steps_per_epoch,
                   step % steps_per_epoch);
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->status.set_step(step);
      state_->status.set_epoch(step / steps_per_epoch);
    }
    return step;
  }

  // strategy.kind switch with the at_fraction rule: the step count after which the orchestrator
  // will ask the workers to switch (the rule's epoch x steps per epoch), when the ring starts
  // before it and training goes past it; 0 otherwise.
  int64_t AtFractionHoldStep(const v1::StartRequest& start, int64_t steps_per_epoch) const {
    const v1::ResolvedStrategy& strategy = options_.job.strategy();
    if (strategy.kind() != v1::STRATEGY_KIND_SWITCH ||
        strategy.rule() != v1::SWITCH_RULE_AT_FRACTION || start.mode() != v1::SYNC_MODE_ALLREDUCE) {
      return 0;
    }
    const int64_t epochs = options_.job.training().epochs();
    const int64_t target = AtFractionSwitchEpoch(strategy.at_fraction(), epochs) * steps_per_epoch;
    return target < epochs * steps_per_epoch ? target : 0;
  }

  // Before the step that completes `hold_at` steps, while no switch request has come: wait for it
  // (up to the worker's deadline). The orchestrator decides from the workers' reported steps, once
  // a tick; a ring of fast steps can pass the target between two ticks, and a request for a step
  // already passed switches later than the rule says, or not at all when training ends first.
  // Held here, every rank of the ring waits at the same step, and the switch lands on it.
  void HoldForTheSwitch(Trainer& trainer, int64_t step, int64_t hold_at) {
    if (hold_at == 0 || step + 1 != hold_at) return;
    if (state_->switch_participant.state() != SwitchState::kIdle) return;
    spdlog::info("holding before step {}: the at_fraction switch is due after it", hold_at);
    const auto began = Clock::now();
    // Meanwhile the training thread's tasks (the evaluator's model fetches) still run.
    const bool came = state_->switch_participant.AwaitRequest(options_.deadline,
                                                              std::chrono::milliseconds(100), [&] {
                                                                state_->RunTasks(trainer);
                                                                return state_->stopping();
                                                              });
    const double waited = std::chrono::duration<double>(Clock::now() - began).count();
    if (came) {
      spdlog::info("the switch request came after {:.3f} s", waited);
    } else if (!state_->stopping()) {
      spdlog::warn("no switch request within {:.0f} s at step {}: training on", waited, hold_at);
    }
  }

  // What GetStatus answers once a step is done.
  void PublishStep(const Synchroniser& sync, int64_t step, double train_loss, int64_t phase_samples,
                   Clock::time_point phase_start, bool switch_begins) {
    // How the tensors travel to each server is decided by the first exchanges (a shared region
    // is asked for before the first push) and changes only when a link reconnects: read when a
    // link's stamp says so, not a few strings every step. A new synchroniser's links have stamps
    // none before had.
    std::optional<std::vector<std::string>> links;
    const auto now = Clock::now();
    if (const uint64_t stamp = sync.ServerLinksStamp(); stamp != links_stamp_) {
      links = sync.ServerLinks();
      links_stamp_ = stamp;
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    if (links && !std::equal(links->begin(), links->end(), state_->status.server_links().begin(),
                             state_->status.server_links().end())) {
      state_->status.clear_server_links();
      for (std::string& l : *links) state_->status.add_server_links(std::move(l));
    }
    state_->status.set_step(step);
    state_->status.set_train_loss(train_loss);
    const double secs = std::chrono::duration<double>(now - phase_start).count();
    state_->status.set_samples_per_s(static_cast<double>(phase_samples) / std::max(secs, 1e-9));
    if (switch_begins) state_->status.set_switch_began_at_step(step);
  }

  absl::Status Train(Trainer& trainer) {
    v1::StartRequest start;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      start = *state_->start;
      state_->status.set_mode(start.mode());
    }
    if (metrics_ != nullptr) metrics_->Phase(start.mode(), false);
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Synchroniser> sync, FirstSynchroniser(start, trainer));
    const int64_t steps_per_epoch = AgreedStepsPerEpoch(start, trainer);
    spdlog::info("training: mode {} ({}), {} examples, {} steps per epoch, {} epochs",
                 ModeName(start.mode()), sync->name(), trainer.shard_size(), steps_per_epoch,
                 options_.job.training().epochs());
    if (ComputeSpeed() < 1) {
      spdlog::info("computing at {} of its speed (cluster.compute_speeds); messages at full speed",
                   ComputeSpeed());
    }
    int64_t step = FirstStep(start, steps_per_epoch);
    const int64_t hold_at = AtFractionHoldStep(start, steps_per_epoch);
    const int64_t first_epoch = step / steps_per_epoch;
    const int64_t first_batch = step % steps_per_epoch;
    auto phase_start = Clock::now();
    int64_t phase_samples = 0;
    // Under parameter servers with a sample budget the job ends when the servers say the budget
    // is spent, not after this worker's epochs: a fast worker keeps cycling its shard while a
    // slow one is still at it, as with TensorFlow's global step. The cap only guards against
    // servers that never report (a lone worker needs about `world` times its epochs).
    const int64_t epochs = options_.job.training().epochs();
    const int64_t epoch_cap = 2 * epochs * std::max(options_.world(), 1) + 1;
    StepOutcome outcome;
    // Only servers with a budget let a worker run past the plan's epochs, so one that rejoins
    // past them trains under a budget, which its first reply will confirm.
    outcome.has_budget = first_epoch >= epochs;
    for (int64_t epoch = first_epoch;
         !outcome.budget_spent && (epoch < epochs || (outcome.has_budget && epoch < epoch_cap));
         ++epoch) {
      trainer.StartEpoch(epoch);
      double loss_sum = 0;
      int64_t seen = 0;
      for (int64_t b = epoch == first_epoch ? first_batch : 0;
           b < steps_per_epoch && !outcome.budget_spent; ++b) {
        state_->RunTasks(trainer);
        if (state_->stopping()) return absl::CancelledError("stopped");
        HoldForTheSwitch(trainer, step, hold_at);
        const auto step_began = Clock::now();
        STRATA_ASSIGN_OR_RETURN(StepStats stats, trainer.ComputeGradients(b));
        SlowTheComputation(Clock::now() - step_began);
        StepContext context{epoch, step, stats.examples, stats.loss};
        // Vote to switch after this step if a request is due; once voted it cannot be withdrawn
        // until the vote's outcome is known.
        context.ready_to_switch = state_->switch_participant.VoteForStep(step + 1);
        auto stepped = sync->Step(trainer, context);
        if (!stepped.ok()) {
          STRATA_ASSIGN_OR_RETURN(
              const AfterBrokenRing after,
              SurviveBrokenRing(trainer, stepped.status(), epoch, step, steps_per_epoch, &sync));
          step = after.step;
          if (after.retry_batch) --b;
          if (after.new_phase) {
            phase_start = Clock::now();
            phase_samples = 0;
          }
          continue;
        }
        outcome = *stepped;
        ++step;
        if (metrics_ != nullptr) {
          metrics_->StepDone(stats.examples,
                             std::chrono::duration<double>(Clock::now() - step_began).count());
        }
        loss_sum += stats.loss * stats.examples;
        seen += stats.examples;
        phase_samples += stats.examples;
        // Before the step is published, so that an evaluation of this epoch finds its model.
        if (step % steps_per_epoch == 0 && InAllReduce()) {
          state_->KeepEpochModel(step / steps_per_epoch, trainer);
        }
        const std::optional<v1::SwitchRequest> switch_now = state_->switch_participant.SettleStep(
            context.ready_to_switch, outcome.all_ready_to_switch);
        PublishStep(*sync, step, loss_sum / seen, phase_samples, phase_start,
                    switch_now.has_value());
        MaybeSaveRingCheckpoint(trainer, step, steps_per_epoch);
        if (switch_now) {
          STRATA_RETURN_IF_ERROR(
              SwitchAfter(trainer, *switch_now, epoch, step, steps_per_epoch, &sync));
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
      spdlog::warn(
          "stopped after {} passes over the shard without the servers reporting the "
          "sample budget spent",
          epoch_cap);
    }
    return absl::OkStatus();
  }

  // Where the training loop goes on after a failed step, if it can.
  struct AfterBrokenRing {
    int64_t step = 0;          // steps completed, as the loop counts on
    bool retry_batch = false;  // run the failed batch again (else its update is in the model)
    bool new_phase = false;    // the synchroniser changed kind: rates start again
  };

  // A failed step ends training unless the ring can be mended: re-formed in an all-reduce job,
  // or left for the parameter servers in a switch job (in both, when recovery is on).
  absl::StatusOr<AfterBrokenRing> SurviveBrokenRing(Trainer& trainer, const absl::Status& why,
                                                    int64_t epoch, int64_t step,
                                                    int64_t steps_per_epoch,
                                                    std::unique_ptr<Synchroniser>* sync) {
    // What the step had to send cannot be sent (Synchroniser::Step): no peer is lost, and no
    // re-formed ring or server would do better.
    if (absl::IsOutOfRange(why)) return why;
    if (MayReform()) {
      STRATA_ASSIGN_OR_RETURN(const int64_t agreed, AwaitNewRing(trainer, why, step, sync));
      return AfterBrokenRing{agreed, agreed == step, false};
    }
    if (!MayFallBack()) return why;
    STRATA_ASSIGN_OR_RETURN(*sync, FallBackToServers(trainer, why, epoch, step, steps_per_epoch));
    return AfterBrokenRing{step, false, true};  // this batch's gradients went down with the ring
  }

  // cluster.compute_speeds: this worker computes at a fraction of its speed while its messages
  // keep theirs (a CPU quota slows both), by waiting after each forward and backward pass for
  // (1 / speed - 1) times its duration. The wait is the emulated computation, not a
  // synchronisation: nothing else is waited for.
  void SlowTheComputation(Clock::duration computed) {
    const double speed = ComputeSpeed();
    if (!(speed > 0 && speed < 1)) return;
    const auto wait = std::chrono::duration_cast<Clock::duration>(computed * (1.0 / speed - 1.0));
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait_for(lock, wait, [&] { return state_->stop; });  // a Stop ends it
  }

  // This worker's cluster.compute_speeds entry; 1 without one.
  double ComputeSpeed() const {
    const auto& speeds = options_.job.cluster().compute_speeds();
    return options_.rank >= 0 && options_.rank < speeds.size() ? speeds.Get(options_.rank) : 1.0;
  }

  bool InAllReduce() {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->status.mode() == v1::SYNC_MODE_ALLREDUCE;
  }

  // The ring of an all-reduce job can be re-formed when recovery is on.
  bool MayReform() {
    const v1::ResolvedJob& job = options_.job;
    if (job.strategy().kind() != v1::STRATEGY_KIND_ALLREDUCE || job.recovery().restarts() == 0) {
      return false;
    }
    return InAllReduce();
  }

  // The ring of an all-reduce job broke under this worker after `step` completed steps (a peer
  // died; `why` is the ring's error). The worker keeps its model and waits for the orchestrator's
  // ReformRing, sent once the dead worker's replacement listens. Every member then connects
  // again, takes the model of the survivor that completed the most steps over the new ring, and
  // goes on from that survivor's count, which is `step` or `step + 1`: a peer's death can end an
  // operation on some ranks and not on others, never more (docs/user-guide.md, "When a process
  // dies"). Returns that count.
  absl::StatusOr<int64_t> AwaitNewRing(Trainer& trainer, const absl::Status& why, int64_t step,
                                       std::unique_ptr<Synchroniser>* sync) {
    spdlog::warn("the ring broke after step {}: {}; waiting for the orchestrator to re-form it",
                 step, std::string(why.message()));
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->reform.reset();
      state_->status.set_ring_broken(std::string(why.message()));
    }
    STRATA_ASSIGN_OR_RETURN(
        const v1::ReformRingRequest request,
        AwaitAfterBrokenRing<v1::ReformRingRequest>(
            trainer, why, "ReformRing", [&]() -> std::optional<v1::ReformRingRequest> {
              std::lock_guard<std::mutex> lock(state_->mu);
              return std::exchange(state_->reform, std::nullopt);
            }));
    const int64_t agreed = request.step();
    const bool source = request.source_rank() == options_.rank;
    if ((agreed != step && agreed != step + 1) || (source && agreed != step)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReformRing: go on from step ", agreed, " with the model of rank ", request.source_rank(),
          ", but this worker (rank ", options_.rank, ") completed ", step,
          " steps: the source's own count, at most one step ahead of any survivor, is expected"));
    }
    std::vector<std::string> peers(request.workers().begin(), request.workers().end());
    STRATA_RETURN_IF_ERROR(synchronisers_->ConnectRing(peers, request.generation()));
    STRATA_ASSIGN_OR_RETURN(auto next, synchronisers_->AllReduce(request.source_rank()));
    STRATA_RETURN_IF_ERROR(Annotate(next->Start(trainer), "re-forming the ring"));
    *sync = std::move(next);
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->status.clear_ring_broken();
      state_->status.set_ring_generation(request.generation());
      state_->status.set_step(agreed);
    }
    spdlog::info(
        "the ring re-formed (generation {}): going on from step {} with the model of "
        "rank {}",
        request.generation(), agreed, request.source_rank());
    return agreed;
  }

  // A broken ring can be survived: a switch job whose recovery is on, still in all-reduce.
  bool MayFallBack() {
    const v1::ResolvedJob& job = options_.job;
    if (job.strategy().kind() != v1::STRATEGY_KIND_SWITCH || job.recovery().restarts() == 0) {
      return false;
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->status.mode() == v1::SYNC_MODE_ALLREDUCE;
  }

  using Outcome = SwitchParticipant::Outcome;

  const WorkerOptions& options_;
  WorkerState* state_;
  SynchroniserFactory* synchronisers_;
  WorkerMetrics* const metrics_;              // may be null
  Clock::time_point next_ring_checkpoint_{};  // the first completed step saves at once
  // The synchroniser's ServerLinksStamp when PublishStep last read its ServerLinks.
  uint64_t links_stamp_ = 0;
};

TrainingLoop::TrainingLoop(const WorkerOptions& options, WorkerState* state,
                           SynchroniserFactory* synchronisers, WorkerMetrics* metrics)
    : runner_(std::make_unique<Runner>(options, state, synchronisers, metrics)) {}

TrainingLoop::~TrainingLoop() = default;

void TrainingLoop::Run(Trainer& trainer) { runner_->Run(trainer); }

}  // namespace strata
