// The worker's half of the live switch (docs/architecture.md, "The live switch"): at most one
// Switch request at a time, the state it is in, and the answer its caller waits for.
//
// Two threads use it. The Switch RPC thread files a request and, if its caller gives up,
// withdraws it. The training thread asks before each step whether to vote for the switch with
// that step's gradients, settles the step once the ring's vote is known, and reports the outcome
// of a switch it carried out. Keeping every transition here, under one lock and with named
// states, replaces four flags that used to be set from three places.
//
//   idle --Request--> pending --VoteForStep (due)--> voted --SettleStep (all voted)--> switching
//                       ^                              |                                   |
//                       +----SettleStep (not all)------+                  Finish(ok): switched
//   A withdrawal ends `pending` at once; in `voted` it is settled after the step (the switch still
//   goes ahead if every rank voted: the peers are switching too). Finish(error) and
//   EndOfTraining return to idle, answering the caller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <absl/status/statusor.h>

#include "strata/v1/worker.pb.h"

namespace strata {

enum class SwitchState { kIdle, kPending, kVoted, kSwitching, kSwitched };
const char* SwitchStateName(SwitchState state);

// The reason a withdrawn request is answered with (CANCELLED).
inline constexpr char kSwitchWithdrawn[] = "switch withdrawn before its step";

class SwitchParticipant {
 public:
  using Outcome = absl::StatusOr<v1::SwitchReply>;

  // A filed request: the caller waits on `outcome` and withdraws with `id`.
  struct Ticket {
    uint64_t id = 0;
    std::shared_future<Outcome> outcome;
  };

  // RPC thread. ALREADY_EXISTS while another request is outstanding; FAILED_PRECONDITION once the
  // worker has switched. The request is due from step `at_step` (0: at once).
  absl::StatusOr<Ticket> Request(const v1::SwitchRequest& request);

  // RPC thread: the caller of ticket `id` gave up. Ends the request at once unless its vote is in
  // flight or the switch has begun; then it is settled after the step. No-op for an old ticket.
  void Withdraw(uint64_t id);

  // Training thread, before the step that takes the worker to `next_step` steps: whether to vote
  // for switching after it. Settles a withdrawal that waited for the previous step.
  bool VoteForStep(int64_t next_step);

  // Training thread, after the step: `voted` is what VoteForStep said, `all_voted` the ring's
  // verdict. Returns the request to carry out now when the vote carried.
  std::optional<v1::SwitchRequest> SettleStep(bool voted, bool all_voted);

  // Training thread: the switch it carried out succeeded (the worker is now switched for good) or
  // failed; the caller gets `outcome`.
  void Finish(Outcome outcome);

  // Training thread: training ended (or failed) with a request still outstanding.
  void EndOfTraining(const absl::Status& why);

  SwitchState state() const;

  // Training thread: waits up to `timeout` while no request has come (state idle), waking at
  // least every `poll` to ask `stop` whether to give up. True once a request is there.
  bool AwaitRequest(std::chrono::milliseconds timeout, std::chrono::milliseconds poll,
                    const std::function<bool()>& stop);

 private:
  void EndWith(Outcome outcome, SwitchState next);  // with mu_ held

  mutable std::mutex mu_;
  std::condition_variable requested_;  // a request came (AwaitRequest)
  SwitchState state_ = SwitchState::kIdle;
  std::optional<v1::SwitchRequest> request_;
  std::shared_ptr<std::promise<Outcome>> answer_;
  uint64_t request_id_ = 0;
  bool withdrawal_pending_ = false;
};

}  // namespace strata
