#include "services/worker/switch_participant.h"

#include <algorithm>
#include <utility>

namespace strata {

const char* SwitchStateName(SwitchState state) {
  switch (state) {
    case SwitchState::kIdle:
      return "idle";
    case SwitchState::kPending:
      return "pending";
    case SwitchState::kVoted:
      return "voted";
    case SwitchState::kSwitching:
      return "switching";
    case SwitchState::kSwitched:
      return "switched";
  }
  return "?";
}

absl::StatusOr<SwitchParticipant::Ticket> SwitchParticipant::Request(
    const v1::SwitchRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == SwitchState::kSwitched) {
    return absl::FailedPreconditionError("Switch: the worker is not in all-reduce mode");
  }
  if (state_ != SwitchState::kIdle) {
    return absl::AlreadyExistsError("Switch: a switch is already pending");
  }
  state_ = SwitchState::kPending;
  request_ = request;
  requested_.notify_all();
  answer_ = std::make_shared<std::promise<Outcome>>();
  withdrawal_pending_ = false;
  return Ticket{++request_id_, answer_->get_future().share()};
}

void SwitchParticipant::Withdraw(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id != request_id_ || answer_ == nullptr) return;  // already answered
  if (state_ == SwitchState::kPending) {
    EndWith(absl::CancelledError(kSwitchWithdrawn), SwitchState::kIdle);
  } else {
    withdrawal_pending_ = true;  // the vote is in flight: settled after the step
  }
}

bool SwitchParticipant::VoteForStep(int64_t next_step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (withdrawal_pending_ && state_ == SwitchState::kPending) {
    EndWith(absl::CancelledError(kSwitchWithdrawn), SwitchState::kIdle);
  }
  if (state_ != SwitchState::kPending) return false;
  // A request for a step already passed is due at once: the ring then agrees on a later one.
  if (request_->at_step() != 0 && request_->at_step() > next_step) return false;
  state_ = SwitchState::kVoted;  // from here the vote travels with the step's gradients
  return true;
}

std::optional<v1::SwitchRequest> SwitchParticipant::SettleStep(bool voted, bool all_voted) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != SwitchState::kVoted) return std::nullopt;
  if (voted && all_voted) {
    state_ = SwitchState::kSwitching;  // every rank switches after this step, withdrawn or not
    return request_;
  }
  if (withdrawal_pending_) {
    EndWith(absl::CancelledError(kSwitchWithdrawn), SwitchState::kIdle);
  } else {
    state_ = SwitchState::kPending;  // a peer did not vote yet: vote again next step
  }
  return std::nullopt;
}

void SwitchParticipant::Finish(Outcome outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = outcome.ok();
  EndWith(std::move(outcome), ok ? SwitchState::kSwitched : SwitchState::kIdle);
}

void SwitchParticipant::EndOfTraining(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (answer_ != nullptr) EndWith(why, SwitchState::kIdle);
}

SwitchState SwitchParticipant::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void SwitchParticipant::EndWith(Outcome outcome, SwitchState next) {
  if (answer_ != nullptr) answer_->set_value(std::move(outcome));
  answer_.reset();
  request_.reset();
  withdrawal_pending_ = false;
  state_ = next;
}

bool SwitchParticipant::AwaitRequest(std::chrono::milliseconds timeout,
                                     std::chrono::milliseconds poll,
                                     const std::function<bool()>& stop) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (state_ == SwitchState::kIdle) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    // Not only a notification: `stop` is another thread's flag.
    lock.unlock();
    if (stop()) return false;
    lock.lock();
    if (state_ != SwitchState::kIdle) break;
    requested_.wait_until(lock, std::min(until, now + poll));
  }
  return true;
}

}  // namespace strata
