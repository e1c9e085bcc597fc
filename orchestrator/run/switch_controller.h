// The orchestrator's half of the live switch from ring all-reduce to the parameter servers, as an
// explicit state machine the run supervisor steps:
//
//   kIdle --Offer--> kDecided --Step--> kAwaitingBoundary --> kLoadingServers --> kResuming -->
//   kDone
//                        |                  |                     |                  |
//                        v                  +---------------------+------------------+--> kFailed
//                     kSkipped (training ends before the switch step)
//
//  kDecided          picks the step (a margin past the fastest worker, or the rule's target),
//                    records the decision and sends every worker its Switch request.
//  kAwaitingBoundary the workers train on and agree on the step among themselves (a request that
//                    reached one late moves it on); worker 0's status names the agreed step when
//                    the pause begins, then the step whose handover model it holds. Has a
//                    deadline.
//  kLoadingServers   every parameter server streams that model from worker 0 and loads its
//                    partition of it (no shared disk); then the servers' copy is read back and
//                    compared with the worker's model (the handover check).
//  kResuming         the workers pull and go on with push/pull; their Switch calls answer with
//                    their own comparison. A handover either check finds unequal (or that could
//                    not be checked) fails the switch and the run: kFailed, the verification in
//                    the switch_failed event.
//
// A fallback (a trigger with lost_rank: a worker died in the ring) takes the same path without the
// dead worker and without a step to agree on: every survivor already waits, holding the model of
// the last step it completed; the first survivor's model goes to the servers.
//
// Each Step makes at most one transition and never sleeps. The controller reaches the cluster only
// through ClusterClient and reports through SwitchEvents. Failures name the process (worker-R,
// ps-P) in the RunFailure and withdraw the workers' outstanding Switch calls.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/record/run_record.h"
#include "orchestrator/record/switch_trigger.h"
#include "orchestrator/run/cluster_client.h"
#include "orchestrator/run/controller.h"

namespace strata {

enum class SwitchState {
  kIdle,
  kDecided,
  kAwaitingBoundary,
  kLoadingServers,
  kResuming,
  kDone,
  kSkipped,
  kFailed,
};
const char* SwitchStateName(SwitchState state);

// What the controller tells the run (the supervisor records it and prints it; tests collect it).
class SwitchEvents {
 public:
  virtual ~SwitchEvents() = default;
  virtual void SwitchDecided(const SwitchDecidedEvent& event) = 0;
  virtual void SwitchSkipped(const SwitchSkippedEvent& event) = 0;
  virtual void SwitchFailed(const SwitchFailedEvent& event) = 0;
  virtual void SwitchDone(const SwitchDoneEvent& event) = 0;
};

struct SwitchControllerOptions {
  std::vector<std::string> server_addresses;  // what the workers connect to, by partition
  std::string checkpoint_dir;                 // worker 0 records switch-step<S>.ckpt here
  std::chrono::milliseconds switch_timeout{300000};
  std::chrono::milliseconds load_timeout{120000};
  std::chrono::milliseconds read_back_timeout{30000};
  std::chrono::milliseconds status_timeout{2000};
  Clock::time_point run_start;  // the zero of the events' wall_s
  // Stamps the end of the handover check, which runs inside one Step: its time is left out of
  // the handover's.
  std::function<Clock::time_point()> clock = [] { return Clock::now(); };
};

// The switch as it happened, for the summary and the phase of later evaluations.
struct SwitchOutcome {
  int64_t switch_step = 0;
  double epoch = 0;
  double handover_s = 0;
  Clock::time_point paused, resumed;
};

class SwitchController final : public Controller {
 public:
  SwitchController(SwitchControllerOptions options, ClusterClient& client, SwitchEvents& events,
                   RunFailure& failure);
  ~SwitchController() override;

  // A rule or the user asks for the switch; taken only while idle (returns whether it was).
  bool Offer(SwitchTrigger trigger);
  absl::Status Step(const ClusterView& view, Clock::time_point now) override;
  std::optional<Clock::duration> StepWithin() const override;
  // The run failed elsewhere (a signal, an exited child) while the switch was under way: record
  // it as the switch's failure too and withdraw the requests.
  void Abandon(const std::string& process, const absl::Status& status);

  SwitchState state() const { return state_; }
  bool idle() const { return state_ == SwitchState::kIdle; }
  // Between the decision and an end state.
  bool in_progress() const;
  // Done, skipped or failed: no further switch in this run.
  bool settled() const;
  // The workers have paused for the handover: the rest of the run leaves them alone.
  bool holds_cluster() const;
  const std::optional<SwitchOutcome>& outcome() const { return outcome_; }

 private:
  absl::Status Decide(const ClusterView& view, Clock::time_point now);
  absl::Status AwaitBoundary(Clock::time_point now);
  absl::Status AwaitLoads(Clock::time_point now);
  absl::Status AwaitResume(const ClusterView& view, Clock::time_point now);
  HandoverVerification VerifyServersHold(const std::vector<int64_t>& loaded_versions);
  absl::Status FailHandover();
  // The first worker whose Switch call failed, as (process, status).
  std::optional<std::pair<std::string, absl::Status>> FailedSwitchCall() const;
  absl::Status Fail(const std::string& process, absl::Status status);
  void WithdrawCalls();
  bool fallback() const { return trigger_.lost_rank.has_value(); }

  SwitchControllerOptions options_;
  ClusterClient& client_;
  SwitchEvents& events_;
  RunFailure& failure_;

  SwitchState state_ = SwitchState::kIdle;
  SwitchTrigger trigger_;
  int64_t requested_at_step_ = 0;
  // The workers that take part (all, or the survivors of a broken ring) and the one whose model
  // the servers load (worker 0, or the first survivor).
  std::vector<int> ranks_;
  int source_ = 0;
  int64_t switch_step_ = 0;
  std::string checkpoint_;
  std::vector<std::unique_ptr<PendingReply<v1::SwitchReply>>> switch_calls_;
  std::vector<std::unique_ptr<PendingReply<v1::CheckpointReply>>> loads_;
  HandoverVerification verification_;
  std::string unverified_by_;  // the process whose read-back failed
  Clock::time_point decided_at_, load_start_, loaded_, verified_;
  std::optional<Clock::time_point> paused_, written_;
  std::optional<SwitchOutcome> outcome_;
};

}  // namespace strata
