// The worker's training loop on its own: a real Trainer on a few Fashion-MNIST examples, fake
// synchronisers whose step fails as a broken ring's does, and the orchestrator's requests filed
// straight into the WorkerState the RPC threads would fill. The fault paths that the recovery
// tests reach with real processes (tests/integration/orchestrator/recovery_test.cc) run here in
// milliseconds: a survivor of a broken ring falling back to the servers, waiting for a re-formed
// ring, and giving up with the ring's error when nobody comes.
#include "services/worker/training_loop.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "services/common/config/job_spec.h"
#include "services/common/ml/dataset.h"
#include "tests/support/fashion_mnist.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kExamples = 64;
constexpr int64_t kBatch = 16;  // 4 steps per epoch
constexpr int64_t kEpochs = 2;
constexpr int64_t kSteps = kEpochs * kExamples / kBatch;
constexpr milliseconds kGenerous{60000};
constexpr char kRingError[] = "ring all-reduce operation 5: rank 1 (127.0.0.1:7) is gone";

// What the fake synchronisers were asked for, in order, for the test to check.
struct FactoryLog {
  std::mutex mu;
  std::vector<std::string> calls;
  int steps = 0;  // steps taken by every synchroniser made
  void Add(std::string call) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(std::move(call));
  }
  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

// A synchroniser that leaves the model alone. A ring's fails the step `fail_at` (the worker's
// step count) as a broken ring does; push/pull's passes a switch vote straight back.
class FakeSynchroniser final : public Synchroniser {
 public:
  FakeSynchroniser(std::string name, FactoryLog* log, int64_t fail_at,
                   absl::Status failure = absl::UnavailableError(kRingError))
      : name_(std::move(name)), log_(log), fail_at_(fail_at), failure_(std::move(failure)) {}
  std::string name() const override { return name_; }
  absl::Status Start(Trainer&) override {
    log_->Add(name_ + " start");
    return absl::OkStatus();
  }
  absl::StatusOr<StepOutcome> Step(Trainer&, const StepContext& context) override {
    if (context.step == fail_at_) return failure_;
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->steps;
    StepOutcome outcome;
    outcome.all_ready_to_switch = name_ == "push-pull" && context.ready_to_switch;
    return outcome;
  }

 private:
  const std::string name_;
  FactoryLog* const log_;
  const int64_t fail_at_;
  const absl::Status failure_;
};

class FakeSynchronisers final : public SynchroniserFactory {
 public:
  // The first ring synchroniser made fails at step `ring_fails_at` (< 0: never); later ones, on
  // a re-formed ring, do not.
  explicit FakeSynchronisers(int64_t ring_fails_at) : ring_fails_at_(ring_fails_at) {}

  absl::Status ConnectRing(const std::vector<std::string>& peers, uint32_t generation) override {
    log.Add(absl::StrCat("connect ring of ", peers.size(), " in generation ", generation));
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Synchroniser>> AllReduce(int source_rank) override {
    log.Add(absl::StrCat("all-reduce from rank ", source_rank));
    const int64_t fail_at = std::exchange(ring_fails_at_, -1);
    return std::make_unique<FakeSynchroniser>("all-reduce", &log, fail_at, ring_failure);
  }
  absl::Status RingBarrier() override {
    log.Add("barrier");
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Synchroniser>> PushPull(const std::vector<std::string>& servers,
                                                         const Trainer&, double lr) override {
    log.Add(absl::StrCat("push-pull with ", servers.size(), " server(s) at lr ", lr));
    return std::make_unique<FakeSynchroniser>("push-pull", &log, -1);
  }

  FactoryLog log;
  absl::Status ring_failure = absl::UnavailableError(kRingError);  // how the ring's step fails

 private:
  int64_t ring_fails_at_;
};

std::shared_ptr<const Dataset> Data() {
  static std::shared_ptr<const Dataset> dataset = testing::FashionMnistSubset(kExamples, 16);
  return dataset;
}

class TrainingLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ConfigureTorchThreads(1); }

  // A worker (rank 1 of 2) of a job of `kind` whose recovery restarts `restarts` times.
  void SetUpWorker(const std::string& kind, int restarts, milliseconds deadline = kGenerous) {
    auto job = ParseJobSpec(
        absl::StrCat("name: loop\nmodel: { arch: mlp }\ncluster: { workers: 2",
                     kind == "allreduce" ? "" : ", parameter_servers: 1",
                     " }\nstrategy: { kind: ", kind, " }\ntraining: { epochs: ", kEpochs,
                     ", batch_size: ", 2 * kBatch, " }\nrecovery: { restarts: ", restarts, " }\n"),
        "training loop test");
    ASSERT_TRUE(job.ok()) << job.status();
    options_.job = *job;
    options_.rank = 1;
    options_.deadline = deadline;
    ASSERT_NE(Data(), nullptr);
    TrainerOptions o;
    o.arch = v1::MODEL_ARCH_MLP;
    o.batch_size = kBatch;
    o.seed = 1;
    o.threads = 1;
    auto trainer = Trainer::Create(o, Data());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    trainer_ = std::move(*trainer);
  }

  // Starts the loop on its thread and sends it Start (all-reduce, two workers).
  void StartTraining(FakeSynchronisers* fakes) {
    loop_ = std::make_unique<TrainingLoop>(options_, &state_, fakes);
    thread_ = std::thread([this] { loop_->Run(*trainer_); });
    v1::StartRequest start;
    start.set_mode(v1::SYNC_MODE_ALLREDUCE);
    start.add_workers("127.0.0.1:6");
    start.add_workers("127.0.0.1:7");
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.start = start;
    }
    state_.cv.notify_all();
  }

  // Waits until the status satisfies `ready` (the loop changes it between steps); false after
  // the generous deadline. The loop notifies no one when it writes the status, so this looks
  // again every few milliseconds: a bounded poll of the condition, not a sleep standing in for it.
  bool AwaitStatus(const std::function<bool(const v1::WorkerStatus&)>& ready) {
    const auto give_up = std::chrono::steady_clock::now() + kGenerous;
    std::unique_lock<std::mutex> lock(state_.mu);
    while (!ready(state_.status)) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      state_.cv.wait_for(lock, milliseconds(5));
    }
    return true;
  }

  // Waits until the loop reports the ring broken (or, failing that, ends) and returns its status.
  v1::WorkerStatus AwaitRingBroken() {
    EXPECT_TRUE(AwaitStatus(
        [](const v1::WorkerStatus& s) { return !s.ring_broken().empty() || s.finished(); }));
    std::lock_guard<std::mutex> lock(state_.mu);
    return state_.status;
  }

  // What the orchestrator's ReformRing brings (WorkerService::ReformRing files it): the ring of
  // generation 1 with the dead rank's replacement, going on from `step` with rank 0's model.
  void ReformRing(int64_t step) {
    v1::ReformRingRequest reform;
    reform.set_generation(1);
    reform.set_step(step);
    reform.set_source_rank(0);
    reform.add_workers("127.0.0.1:6");
    reform.add_workers("127.0.0.1:8");  // the replacement
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.reform = reform;
    }
    state_.cv.notify_all();
  }

  // Stops the loop (it serves tasks until Stop once training is over) and returns its status.
  v1::WorkerStatus FinishedStatus() {
    EXPECT_TRUE(AwaitStatus([](const v1::WorkerStatus& s) { return s.finished(); }));
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.stop = true;
    }
    state_.cv.notify_all();
    thread_.join();
    std::lock_guard<std::mutex> lock(state_.mu);
    return state_.status;
  }

  void TearDown() override {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.stop = true;
    }
    state_.cv.notify_all();
    thread_.join();
  }

  WorkerOptions options_;
  WorkerState state_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<TrainingLoop> loop_;
  std::thread thread_;
};

v1::SwitchRequest SwitchToServers(double lr) {
  v1::SwitchRequest request;
  request.set_mode(v1::SYNC_MODE_PS);
  request.add_parameter_servers("127.0.0.1:9");
  request.set_lr(lr);
  return request;
}

// FallBackToServers: in a switch job with recovery on, a survivor keeps the model of the last
// step it completed for the servers, says so in its status, and once the orchestrator's Switch
// comes goes on with push/pull from there, without the ring's vote or barrier; the batch of the
// failed step is lost. (Breaking it on purpose: with MayFallBack() false, training stopped with
// the ring's error and no handover model.)
TEST_F(TrainingLoopTest, ASurvivorOfABrokenRingInASwitchJobFallsBackToTheServers) {
  SetUpWorker("switch", /*restarts=*/2);
  FakeSynchronisers fakes(/*ring_fails_at=*/5);
  StartTraining(&fakes);
  const v1::WorkerStatus broken = AwaitRingBroken();
  ASSERT_NE(broken.ring_broken().find(kRingError), std::string::npos) << broken.error();
  EXPECT_EQ(broken.switch_began_at_step(), 5);
  EXPECT_EQ(broken.handover_model_step(), 5);
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    ASSERT_NE(state_.handover_model, nullptr) << "the model the servers will load";
  }
  absl::StatusOr<SwitchParticipant::Ticket> ticket =
      state_.switch_participant.Request(SwitchToServers(0.025));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_EQ(ticket->outcome.wait_for(kGenerous), std::future_status::ready);
  const SwitchParticipant::Outcome reply = ticket->outcome.get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->switched_at_step(), 5);

  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_EQ(status.error(), "");
  EXPECT_EQ(status.mode(), v1::SYNC_MODE_PS);
  EXPECT_EQ(status.switched_at_step(), 5);
  EXPECT_EQ(status.ring_broken(), "");
  EXPECT_EQ(status.step(), kSteps - 1) << "the failed step's batch went down with the ring";
  EXPECT_EQ(fakes.log.Calls(),
            (std::vector<std::string>{"connect ring of 2 in generation 0", "all-reduce from rank 0",
                                      "all-reduce start", "push-pull with 1 server(s) at lr 0.025",
                                      "push-pull start"}))
      << "no barrier: the ring is gone";
}

// Without a Switch within the worker's deadline the ring's error stands, and says what did not
// come.
TEST_F(TrainingLoopTest, ASurvivorThatGetsNoSwitchStopsWithTheRingsError) {
  SetUpWorker("switch", /*restarts=*/2, /*deadline=*/milliseconds(200));
  FakeSynchronisers fakes(/*ring_fails_at=*/2);
  StartTraining(&fakes);
  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_NE(status.error().find(kRingError), std::string::npos) << status.error();
  EXPECT_NE(status.error().find("the ring broke and no Switch came"), std::string::npos)
      << status.error();
  EXPECT_EQ(status.step(), 2);
}

// Without recovery a broken ring ends training at once, with its error.
TEST_F(TrainingLoopTest, WithoutRecoveryABrokenRingEndsTrainingWithItsError) {
  SetUpWorker("switch", /*restarts=*/0);
  FakeSynchronisers fakes(/*ring_fails_at=*/3);
  StartTraining(&fakes);
  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_EQ(status.error(), kRingError);
  EXPECT_EQ(status.ring_broken(), "");
  EXPECT_EQ(status.handover_model_step(), 0);
}

// A step whose values cannot be sent at all (OUT_OF_RANGE: a gradient beyond the 16-bit ring's
// range) is not a lost peer: with recovery on, training stops with it at once instead of waiting
// for a re-formed ring that would change nothing. (Seen to fail: without the check in
// SurviveBrokenRing the worker reported its ring broken and waited for a ReformRing.)
TEST_F(TrainingLoopTest, AStepThatCannotBeSentEndsTrainingWithoutWaitingForANewRing) {
  SetUpWorker("allreduce", /*restarts=*/3);
  FakeSynchronisers fakes(/*ring_fails_at=*/3);
  fakes.ring_failure = absl::OutOfRangeError(
      "all-reduce operation 3 on rank 1: a value beyond "
      "65,504, the largest 16-bit float");
  StartTraining(&fakes);
  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_EQ(status.error(), fakes.ring_failure.message());
  EXPECT_EQ(status.ring_broken(), "");
}

// AwaitNewRing: in an all-reduce job with recovery on, a survivor keeps its model, waits for the
// orchestrator's ReformRing, connects to the new ring in its generation, takes the model of the
// source rank, and goes on from the agreed step. `agreed` is the step the source completed: this
// survivor's own count (it runs the failed batch again) or one more (the failed operation
// completed on the source, and the batch is in the model). (Breaking it on purpose: with the
// failed batch never run again, TheSurvivorsOwnCount ended one step short, at 7 of 8.)
class AwaitNewRingTest : public TrainingLoopTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(AwaitNewRingTest, ASurvivorOfABrokenRingInAnAllReduceJobJoinsTheReformedRing) {
  const int64_t agreed = 5 + GetParam();
  SetUpWorker("allreduce", /*restarts=*/2);
  FakeSynchronisers fakes(/*ring_fails_at=*/5);
  StartTraining(&fakes);
  const v1::WorkerStatus broken = AwaitRingBroken();
  ASSERT_NE(broken.ring_broken(), "") << broken.error();
  ReformRing(/*step=*/agreed);

  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_EQ(status.error(), "");
  EXPECT_EQ(status.mode(), v1::SYNC_MODE_ALLREDUCE);
  EXPECT_EQ(status.ring_generation(), 1u);
  EXPECT_EQ(status.ring_broken(), "");
  EXPECT_EQ(status.step(), kSteps) << "no step lost, none run twice";
  std::lock_guard<std::mutex> lock(fakes.log.mu);
  EXPECT_EQ(fakes.log.steps, kSteps - GetParam())
      << "steps completed on the two rings: the failed batch runs again only if it is not in "
         "the source's model";
  EXPECT_EQ(fakes.log.calls,
            (std::vector<std::string>{"connect ring of 2 in generation 0", "all-reduce from rank 0",
                                      "all-reduce start", "connect ring of 2 in generation 1",
                                      "all-reduce from rank 0", "all-reduce start"}));
}

INSTANTIATE_TEST_SUITE_P(AgreedStep, AwaitNewRingTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param == 0 ? std::string("TheSurvivorsOwnCount")
                                                  : std::string("OneStepAhead");
                         });

// A ReformRing whose step no survivor could have reached is refused, naming both counts.
TEST_F(TrainingLoopTest, AReformedRingTooFarAheadIsRefused) {
  SetUpWorker("allreduce", /*restarts=*/2);
  FakeSynchronisers fakes(/*ring_fails_at=*/5);
  StartTraining(&fakes);
  const v1::WorkerStatus broken = AwaitRingBroken();
  ASSERT_NE(broken.ring_broken(), "") << broken.error();
  ReformRing(/*step=*/7);
  const v1::WorkerStatus status = FinishedStatus();
  EXPECT_NE(status.error().find("go on from step 7"), std::string::npos) << status.error();
  EXPECT_NE(status.error().find("completed 5 steps"), std::string::npos) << status.error();
}

}  // namespace
}  // namespace strata
