// The worker's switch handshake alone, no ring and no process: every transition of
// SwitchParticipant, including the late vote, the withdrawal while a vote is in flight, and a
// caller whose ticket is old.
#include "services/worker/switch_participant.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

v1::SwitchRequest At(int64_t at_step) {
  v1::SwitchRequest r;
  r.set_mode(v1::SYNC_MODE_PS);
  r.add_parameter_servers("127.0.0.1:1");
  r.set_at_step(at_step);
  return r;
}

bool Answered(const SwitchParticipant::Ticket& t) {
  return t.outcome.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

v1::SwitchReply Reply(int64_t step) {
  v1::SwitchReply r;
  r.set_switched_at_step(step);
  return r;
}

TEST(SwitchParticipant, VotesFromItsStepAndSwitchesWhenEveryRankVoted) {
  SwitchParticipant p;
  auto t = p.Request(At(5));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(p.state(), SwitchState::kPending);
  EXPECT_FALSE(p.VoteForStep(4));  // the step to 4 is before at_step
  EXPECT_FALSE(p.SettleStep(false, false).has_value());
  EXPECT_TRUE(p.VoteForStep(5));
  EXPECT_EQ(p.state(), SwitchState::kVoted);
  // A peer had not voted: vote again at the next step (the late vote).
  EXPECT_FALSE(p.SettleStep(true, false).has_value());
  EXPECT_EQ(p.state(), SwitchState::kPending);
  EXPECT_TRUE(p.VoteForStep(6));
  auto carried = p.SettleStep(true, true);
  ASSERT_TRUE(carried.has_value());
  EXPECT_EQ(carried->at_step(), 5);
  EXPECT_EQ(p.state(), SwitchState::kSwitching);
  EXPECT_FALSE(Answered(*t));
  p.Finish(Reply(6));
  ASSERT_TRUE(Answered(*t));
  EXPECT_EQ(t->outcome.get()->switched_at_step(), 6);
  EXPECT_EQ(p.state(), SwitchState::kSwitched);
  // Switched for good: no second switch.
  EXPECT_EQ(p.Request(At(0)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SwitchParticipant, ARequestForAPassedStepIsDueAtOnce) {
  SwitchParticipant p;
  ASSERT_TRUE(p.Request(At(0)).ok());
  EXPECT_TRUE(p.VoteForStep(1));
  SwitchParticipant q;
  ASSERT_TRUE(q.Request(At(3)).ok());
  EXPECT_TRUE(q.VoteForStep(100));
}

TEST(SwitchParticipant, OneRequestAtATime) {
  SwitchParticipant p;
  ASSERT_TRUE(p.Request(At(5)).ok());
  EXPECT_EQ(p.Request(At(6)).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(SwitchParticipant, AWithdrawnPendingRequestEndsAtOnceAndMakesRoom) {
  SwitchParticipant p;
  auto t = p.Request(At(50));
  ASSERT_TRUE(t.ok());
  p.Withdraw(t->id);
  ASSERT_TRUE(Answered(*t));
  EXPECT_EQ(t->outcome.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(p.state(), SwitchState::kIdle);
  EXPECT_FALSE(p.VoteForStep(60));
  auto again = p.Request(At(50));
  ASSERT_TRUE(again.ok());
  // The old caller's late withdrawal does not touch the new request.
  p.Withdraw(t->id);
  EXPECT_FALSE(Answered(*again));
  EXPECT_EQ(p.state(), SwitchState::kPending);
}

TEST(SwitchParticipant, AWithdrawalDuringAVoteIsSettledByTheVote) {
  {  // The vote fails: the request is dropped after the step.
    SwitchParticipant p;
    auto t = p.Request(At(0));
    ASSERT_TRUE(p.VoteForStep(1));
    p.Withdraw(t->id);
    EXPECT_FALSE(Answered(*t)) << "withdrawn while its vote was in flight";
    EXPECT_FALSE(p.SettleStep(true, false).has_value());
    ASSERT_TRUE(Answered(*t));
    EXPECT_EQ(t->outcome.get().status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(p.state(), SwitchState::kIdle);
  }
  {  // The vote carries: every rank switches, so this one does too, and its caller is answered.
    SwitchParticipant p;
    auto t = p.Request(At(0));
    ASSERT_TRUE(p.VoteForStep(1));
    p.Withdraw(t->id);
    ASSERT_TRUE(p.SettleStep(true, true).has_value());
    EXPECT_EQ(p.state(), SwitchState::kSwitching);
    p.Finish(Reply(1));
    EXPECT_TRUE(t->outcome.get().ok());
  }
}

TEST(SwitchParticipant, AFailedSwitchOrTheEndOfTrainingAnswersTheCaller) {
  SwitchParticipant p;
  auto t = p.Request(At(0));
  ASSERT_TRUE(p.VoteForStep(1));
  ASSERT_TRUE(p.SettleStep(true, true).has_value());
  p.Finish(absl::UnavailableError("servers gone"));
  EXPECT_EQ(t->outcome.get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(p.state(), SwitchState::kIdle);

  auto late = p.Request(At(1000));
  ASSERT_TRUE(late.ok());
  p.EndOfTraining(absl::AbortedError("training ended before the switch step"));
  EXPECT_EQ(late->outcome.get().status().code(), absl::StatusCode::kAborted);
  p.EndOfTraining(absl::AbortedError("again"));  // nothing outstanding: no-op
}

// Callers that file and withdraw at random against a training thread stepping through votes:
// every caller is answered exactly once (a promise set twice would throw), and nothing hangs.
TEST(SwitchParticipant, EveryCallerIsAnsweredUnderConcurrentWithdrawals) {
  SwitchParticipant p;
  std::atomic<bool> done{false};
  std::thread training([&] {
    for (int64_t step = 0; !done.load(); ++step) {
      const bool voted = p.VoteForStep(step + 1);
      // The ring never agrees, so the worker never switches and requests keep coming.
      p.SettleStep(voted, false);
    }
  });
  int answered = 0;
  for (int i = 0; i < 2000; ++i) {
    auto t = p.Request(At(i % 3));
    if (!t.ok()) continue;
    p.Withdraw(t->id);
    ASSERT_EQ(t->outcome.wait_for(std::chrono::seconds(60)), std::future_status::ready) << i;
    EXPECT_EQ(t->outcome.get().status().code(), absl::StatusCode::kCancelled);
    ++answered;
  }
  done = true;
  training.join();
  EXPECT_EQ(answered, 2000);
}

}  // namespace
}  // namespace strata
