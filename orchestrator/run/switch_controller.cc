#include "orchestrator/run/switch_controller.h"

#include <algorithm>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "orchestrator/run/handover_check.h"
#include "services/common/base/status.h"
#include "services/common/wire/checkpoint.h"

namespace strata {
namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string WorkerName(size_t rank) { return absl::StrCat("worker-", rank); }
std::string ServerName(size_t partition) { return absl::StrCat("ps-", partition); }

}  // namespace

const char* SwitchStateName(SwitchState state) {
  switch (state) {
    case SwitchState::kIdle:
      return "idle";
    case SwitchState::kDecided:
      return "decided";
    case SwitchState::kAwaitingBoundary:
      return "awaiting boundary";
    case SwitchState::kLoadingServers:
      return "loading servers";
    case SwitchState::kResuming:
      return "resuming";
    case SwitchState::kDone:
      return "done";
    case SwitchState::kSkipped:
      return "skipped";
    case SwitchState::kFailed:
      return "failed";
  }
  return "unknown";
}

SwitchController::SwitchController(SwitchControllerOptions options, ClusterClient& client,
                                   SwitchEvents& events, RunFailure& failure)
    : options_(std::move(options)), client_(client), events_(events), failure_(failure) {}

SwitchController::~SwitchController() = default;

bool SwitchController::Offer(SwitchTrigger trigger) {
  if (state_ != SwitchState::kIdle) return false;
  trigger_ = std::move(trigger);
  state_ = SwitchState::kDecided;
  return true;
}

bool SwitchController::in_progress() const {
  return state_ == SwitchState::kDecided || state_ == SwitchState::kAwaitingBoundary ||
         state_ == SwitchState::kLoadingServers || state_ == SwitchState::kResuming;
}

bool SwitchController::settled() const {
  return state_ == SwitchState::kDone || state_ == SwitchState::kSkipped ||
         state_ == SwitchState::kFailed;
}

bool SwitchController::holds_cluster() const {
  return (state_ == SwitchState::kAwaitingBoundary && paused_) ||
         state_ == SwitchState::kLoadingServers || state_ == SwitchState::kResuming;
}

// Near the step boundary and during the handover every millisecond counts: a loopback GetStatus
// costs well under one, and the handover is measured in tens of them.
std::optional<Clock::duration> SwitchController::StepWithin() const {
  switch (state_) {
    case SwitchState::kDecided:
      return Clock::duration::zero();
    case SwitchState::kAwaitingBoundary:
      return std::chrono::milliseconds(2);
    case SwitchState::kLoadingServers:
    case SwitchState::kResuming:
      return std::chrono::milliseconds(1);
    default:
      return std::nullopt;
  }
}

absl::Status SwitchController::Step(const ClusterView& view, Clock::time_point now) {
  switch (state_) {
    case SwitchState::kDecided:
      return Decide(view, now);
    case SwitchState::kAwaitingBoundary:
      return AwaitBoundary(now);
    case SwitchState::kLoadingServers:
      return AwaitLoads(now);
    case SwitchState::kResuming:
      return AwaitResume(view, now);
    default:
      return absl::OkStatus();
  }
}

absl::Status SwitchController::Decide(const ClusterView& view, Clock::time_point now) {
  ranks_.clear();
  for (int r = 0; r < client_.worker_count(); ++r) {
    if (r != trigger_.lost_rank) ranks_.push_back(r);
  }
  source_ = ranks_.empty() ? 0 : ranks_.front();
  int64_t at_step = view.MaxStep() + view.SwitchMargin();
  // The workers hold before the at_fraction target until this request comes
  // (training_loop.cc), so a target not yet passed is asked for exactly, however late this pass.
  if (trigger_.target_step && view.MaxStep() < *trigger_.target_step) {
    at_step = *trigger_.target_step;
  }
  if (fallback()) at_step = 0;  // the survivors have stopped already: at once
  const int64_t last_step = view.LastStep();
  events_.SwitchDecided({trigger_, at_step, SecondsBetween(options_.run_start, now)});
  if (ranks_.empty()) {
    return Fail(WorkerName(*trigger_.lost_rank),
                absl::AbortedError("the ring broke and no worker is left to hand over from"));
  }
  if (!fallback() && at_step >= last_step) {
    state_ = SwitchState::kSkipped;
    events_.SwitchSkipped({"training ends before the switch step", at_step, last_step});
    return absl::OkStatus();
  }
  requested_at_step_ = at_step;
  decided_at_ = now;
  // The workers finish the agreed step (at_step unless a request came late), worker 0 writes the
  // model, and all wait for the servers.
  v1::SwitchRequest request;
  request.set_mode(v1::SYNC_MODE_PS);
  for (const std::string& a : options_.server_addresses) request.add_parameter_servers(a);
  request.set_at_step(at_step);
  if (fallback()) request.set_lost_peer(WorkerName(*trigger_.lost_rank));
  for (int r : ranks_) {
    switch_calls_.push_back(client_.BeginSwitch(r, request, options_.switch_timeout));
  }
  state_ = SwitchState::kAwaitingBoundary;
  return absl::OkStatus();
}

absl::Status SwitchController::AwaitBoundary(Clock::time_point now) {
  if (auto f = FailedSwitchCall()) return Fail(f->first, f->second);
  // The workers agree on the step themselves; the source's status (worker 0's) names it the
  // moment the pause begins, and then the step whose handover model it holds.
  auto status = client_.GetWorkerStatus(source_, options_.status_timeout);
  if (status.ok() && !paused_ && status->switch_began_at_step() > 0) {
    paused_ = now;
    switch_step_ = status->switch_began_at_step();
    // Worker 0 writes it for the record in a planned switch; a fallback writes none.
    if (!fallback()) {
      checkpoint_ = absl::StrCat(options_.checkpoint_dir, "/switch-step", switch_step_, ".ckpt");
    }
  }
  if (status.ok() && paused_ && status->handover_model_step() == switch_step_) {
    written_ = now;
    load_start_ = now;
    // The servers stream the model from the worker: nothing passes through a shared disk.
    v1::CheckpointRequest load;
    load.set_from_worker(client_.WorkerAddress(source_));
    load.set_from_worker_step(switch_step_);
    for (int p = 0; p < client_.server_count(); ++p) {
      loads_.push_back(client_.BeginLoadCheckpoint(p, load, options_.load_timeout));
    }
    state_ = SwitchState::kLoadingServers;
    return absl::OkStatus();
  }
  if (now - decided_at_ > options_.switch_timeout) {
    return Fail(
        WorkerName(source_),
        absl::DeadlineExceededError(absl::StrCat(
            "worker ", source_, " did not hold its handover model (requested at step ",
            requested_at_step_, ") within ", options_.switch_timeout.count() / 1000, " s")));
  }
  return absl::OkStatus();
}

absl::Status SwitchController::AwaitLoads(Clock::time_point now) {
  for (const auto& load : loads_) {
    if (!load->done()) return absl::OkStatus();
  }
  std::vector<int64_t> loaded_versions;
  for (size_t p = 0; p < loads_.size(); ++p) {
    if (!loads_[p]->result().ok()) return Fail(ServerName(p), loads_[p]->result().status());
    loaded_versions.push_back(loads_[p]->result()->version());
  }
  loaded_ = now;
  // Done before any worker could have pushed (they are still computing their first step) and
  // confirmed by the version; its time is not part of the handover.
  verification_ = VerifyServersHold(loaded_versions);
  verified_ = options_.clock();
  // Servers that already differ need not wait for the workers' word.
  if (verification_.error || ServersDiffer(verification_)) return FailHandover();
  state_ = SwitchState::kResuming;
  return absl::OkStatus();
}

absl::Status SwitchController::AwaitResume(const ClusterView& view, Clock::time_point now) {
  bool all_answered = true;
  for (const auto& call : switch_calls_) all_answered = all_answered && call->done();
  if (auto f = FailedSwitchCall()) return Fail(f->first, f->second);
  if (!all_answered) return absl::OkStatus();
  double workers_max_abs_diff = 0;
  for (const auto& call : switch_calls_) {
    workers_max_abs_diff = std::max(workers_max_abs_diff, call->result()->handover_max_abs_diff());
  }
  FinishHandoverVerification(workers_max_abs_diff, verification_);
  if (!verification_.weights_equal) return FailHandover();
  SwitchOutcome outcome;
  outcome.switch_step = switch_step_;
  outcome.epoch = static_cast<double>(switch_step_) / view.StepsPerEpoch();
  outcome.handover_s = SecondsBetween(*paused_, now) - SecondsBetween(loaded_, verified_);
  outcome.paused = *paused_;
  outcome.resumed = now;
  outcome_ = outcome;
  state_ = SwitchState::kDone;
  SwitchDoneEvent done;
  done.at_step = switch_step_;
  done.requested_at_step = requested_at_step_;
  done.epoch = outcome.epoch;
  done.handover_s = outcome.handover_s;
  done.checkpoint = checkpoint_;
  done.checkpoint_s = SecondsBetween(*paused_, *written_);
  done.load_s = SecondsBetween(load_start_, loaded_);
  done.resume_s = SecondsBetween(verified_, now);
  done.wall_s = SecondsBetween(options_.run_start, now);
  done.verification = verification_;
  events_.SwitchDone(done);
  return absl::OkStatus();
}

HandoverVerification SwitchController::VerifyServersHold(
    const std::vector<int64_t>& loaded_versions) {
  HandoverVerification failed;
  auto checkpoint = client_.ReadHandoverModel(source_, switch_step_, options_.read_back_timeout);
  if (!checkpoint.ok()) {
    failed.error = std::string(checkpoint.status().message());
    unverified_by_ = WorkerName(source_);
    return failed;
  }
  // A planned switch has worker 0's file; a fallback keeps the model it handed over here, so that
  // the run directory holds what the servers were given either way.
  if (fallback() && !options_.checkpoint_dir.empty()) {
    const std::string path =
        absl::StrCat(options_.checkpoint_dir, "/switch-step", switch_step_, ".ckpt");
    if (WriteCheckpoint(path, *checkpoint).ok()) checkpoint_ = path;
  }
  std::vector<ServerModelRead> reads;
  for (int p = 0; p < client_.server_count(); ++p) {
    auto read = client_.ReadServerModel(p, options_.read_back_timeout);
    if (!read.ok()) {
      failed.error = std::string(read.status().message());
      unverified_by_ = ServerName(p);
      return failed;
    }
    reads.push_back(std::move(*read));
  }
  return CompareServersWithCheckpoint(*checkpoint, reads, loaded_versions);
}

// The servers do not hold the model that was handed over, or that could not be shown. By now a
// worker may already train from what the servers hold (each pulls as soon as its server has
// loaded), so a second load could not undo it: the run stops, and `strata resume` takes it up from
// the last all-reduce checkpoint (docs/user-guide.md, "When the handover check fails").
absl::Status SwitchController::FailHandover() {
  std::string process, error;
  if (verification_.error) {
    process = unverified_by_;
    error = absl::StrCat("the handover could not be checked: ", *verification_.error);
  } else if (ServersDiffer(verification_)) {
    if (!verification_.differing.empty() && absl::StartsWith(verification_.differing[0], "ps-")) {
      process = verification_.differing[0].substr(0, verification_.differing[0].find(':'));
    }
    error = absl::StrCat(
        "the parameter servers do not hold the handed-over model of step ", switch_step_, ": ",
        verification_.tensors_differing, " of ", verification_.tensors_compared,
        " tensor(s) or pieces of one differ, ", verification_.tensors_missing, " missing",
        verification_.differing.empty() ? "" : " (", absl::StrJoin(verification_.differing, ", "),
        verification_.differing.empty() ? "" : ")");
  } else {
    error = absl::StrCat("the workers pulled weights up to ", verification_.workers_max_abs_diff,
                         " away from the model they handed over at step ", switch_step_);
  }
  SwitchFailedEvent event{error, process, verification_};
  events_.SwitchFailed(event);
  WithdrawCalls();
  state_ = SwitchState::kFailed;
  return failure_.Fail(process, absl::DataLossError(error));
}

std::optional<std::pair<std::string, absl::Status>> SwitchController::FailedSwitchCall() const {
  for (size_t i = 0; i < switch_calls_.size(); ++i) {
    const auto& call = *switch_calls_[i];
    if (call.done() && !call.result().ok()) {
      return std::make_pair(WorkerName(ranks_[i]), Annotate(call.result().status(), "switch"));
    }
  }
  return std::nullopt;
}

absl::Status SwitchController::Fail(const std::string& process, absl::Status status) {
  events_.SwitchFailed({std::string(status.message()), process, std::nullopt});
  WithdrawCalls();
  state_ = SwitchState::kFailed;
  return failure_.Fail(process, std::move(status));
}

void SwitchController::Abandon(const std::string& process, const absl::Status& status) {
  if (!in_progress()) return;
  if (state_ == SwitchState::kDecided) {
    // Nothing was asked of the workers yet.
    state_ = SwitchState::kFailed;
    return;
  }
  events_.SwitchFailed({std::string(status.message()), process, std::nullopt});
  WithdrawCalls();
  state_ = SwitchState::kFailed;
}

// A caller that gives up withdraws its request (unless the worker's switch has already begun).
void SwitchController::WithdrawCalls() {
  for (auto& call : switch_calls_) {
    if (!call->done()) call->Cancel();
  }
}

}  // namespace strata
