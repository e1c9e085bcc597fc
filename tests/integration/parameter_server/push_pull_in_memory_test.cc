// The push/pull synchroniser and its partition clients against PartitionStores of this process,
// over the in-memory PartitionLink: between the store-level tests (consistency_policy_test, which
// drives a store by hand) and the process tests (ps_training_test, ps_server_test), and as fast as
// the first. What they check is the clients' own behaviour, whatever the link: waiting for a
// server that went away, the job's sample budget, the deadline, a refused push. In this
// executable because the clients take their partition plan from a Trainer (LibTorch).
#include <cmath>
#include <future>
#include <limits>

#include <gtest/gtest.h>

#include "services/common/config/job_spec.h"
#include "services/common/ml/trainer.h"
#include "services/parameter_server/partition.h"
#include "services/worker/in_memory_partition_link.h"
#include "services/worker/partition_clients.h"
#include "services/worker/push_pull_sync.h"
#include "tests/support/fashion_mnist.h"

namespace strata::testing {
namespace {

constexpr int64_t kTrainExamples = 256;
constexpr int64_t kBatch = 32;
constexpr auto kGenerous = std::chrono::seconds(60);

std::shared_ptr<const Dataset> Data() {
  static std::shared_ptr<const Dataset> dataset = FashionMnistSubset(kTrainExamples, 64);
  return dataset;
}

std::unique_ptr<Trainer> MakeTrainer() {
  TrainerOptions o;
  o.arch = v1::MODEL_ARCH_MLP;
  o.batch_size = kBatch;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.seed = 5;
  o.threads = 1;
  auto t = Trainer::Create(o, Data());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

class PushPullInMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ConfigureTorchThreads(1); }

  void SetUp() override {
    ASSERT_NE(Data(), nullptr);
    trainer_ = MakeTrainer();
    ASSERT_TRUE(trainer_);
  }

  // Partition `p` of a job of `workers` and `consistency` with one server, holding trainer_'s
  // model; `sample_budget` 0: none.
  std::unique_ptr<ParameterPartition> Store(int workers, const std::string& consistency,
                                            int64_t sample_budget = 0) {
    auto job = ParseJobSpec(
        absl::StrCat("name: in-memory\nmodel: { arch: mlp }\ncluster: { workers: ", workers,
                     ", parameter_servers: 1 }\nstrategy: { kind: ps, consistency: ", consistency,
                     " }\ntraining: { lr: 0.05, momentum: 0.9, batch_size: ", kBatch, " }\n"),
        "in-memory job");
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return nullptr;
    auto config = PartitionConfigFor(*job, 0, kTrainExamples);
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return nullptr;
    config->sample_budget = sample_budget;
    auto store = std::make_unique<ParameterPartition>(*config);
    EXPECT_TRUE(store->Load(trainer_->ToCheckpoint(0, 0, 0), "the test's trainer").ok());
    return store;
  }

  std::unique_ptr<Synchroniser> Sync(InMemoryPartitionServers& servers, int rank,
                                     std::chrono::milliseconds deadline = kGenerous) {
    PushPullOptions o;
    o.clients.servers = {"in-memory-0"};
    o.clients.rank = rank;
    o.clients.deadline = deadline;
    o.clients.make_link = servers.LinkFactory();
    auto sync = MakePushPullSynchroniser(o, *trainer_);
    EXPECT_TRUE(sync.ok()) << sync.status();
    return sync.ok() ? std::move(*sync) : nullptr;
  }

  // Serves `store` in memory and starts a push/pull synchroniser of rank 0 against it (sync_).
  void StartAgainst(std::unique_ptr<ParameterPartition> store,
                    std::chrono::milliseconds deadline = kGenerous) {
    ASSERT_TRUE(store);
    store_ = std::move(store);
    servers_ =
        std::make_unique<InMemoryPartitionServers>(std::vector<PartitionStore*>{store_.get()});
    sync_ = Sync(*servers_, 0, deadline);
    ASSERT_TRUE(sync_);
    ASSERT_TRUE(sync_->Start(*trainer_).ok());
    trainer_->StartEpoch(0);
  }

  absl::StatusOr<StepOutcome> Step(Synchroniser& sync, int64_t step) {
    auto stats = trainer_->ComputeGradients(step % trainer_->batches_per_epoch());
    if (!stats.ok()) return stats.status();
    return sync.Step(*trainer_, {0, step, stats->examples, stats->loss});
  }

  // The largest difference between the trainer's weights and `store`'s model.
  float DifferenceFrom(PartitionStore& store) {
    WaitOptions wait;
    wait.deadline = std::chrono::system_clock::now() + kGenerous;
    auto snapshot = store.Pull(-1, 0, wait);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    if (!snapshot.ok()) return std::numeric_limits<float>::infinity();
    float worst = 0;
    for (int64_t i = 0; i < trainer_->parameter_count(); ++i) {
      worst = std::max(worst, std::fabs(trainer_->parameter_data()[i] - (*snapshot->values)[i]));
    }
    return worst;
  }

  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<ParameterPartition> store_;
  std::unique_ptr<InMemoryPartitionServers> servers_;
  std::unique_ptr<Synchroniser> sync_;
};

// A server restarted from its last save (docs/user-guide.md, "When a process dies"): the
// worker's exchange waits for it, loses its push, and goes on from the model the server resumed
// with. (Breaking it on purpose: with PartitionClients::Exchange returning UNAVAILABLE at once
// instead of waiting, the step failed with "push/pull with parameter server 0 (in-memory-0): the
// server is stopped".)
TEST_F(PushPullInMemoryTest, AnExchangeWaitsForARestartedServerAndTakesTheModelItResumedWith) {
  ASSERT_NO_FATAL_FAILURE(StartAgainst(Store(1, "asp")));
  Synchroniser& sync = *sync_;
  ASSERT_TRUE(Step(sync, 0).ok());
  const Checkpoint save = store_->ToCheckpoint();  // the server's last save, at version 1
  ASSERT_TRUE(Step(sync, 1).ok());
  ASSERT_EQ(store_->Status().version, 2);

  InMemoryPartitionServers& servers = *servers_;
  servers.Stop(0);
  auto restarted = Store(1, "asp");
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(restarted->Load(save, "the last save").ok());
  auto stepped = std::async(std::launch::async, [&] { return Step(sync, 2); });
  ASSERT_TRUE(servers.AwaitRefusedCall(0, kGenerous)) << "the worker never asked";
  servers.Serve(0, restarted.get());
  const absl::StatusOr<StepOutcome> outcome = stepped.get();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(restarted->Status().version, 1) << "the push to the stopped server is lost";
  EXPECT_EQ(DifferenceFrom(*restarted), 0.0f) << "the worker computes on the resumed model";
  ASSERT_TRUE(Step(sync, 3).ok());
  EXPECT_EQ(restarted->Status().version, 2) << "and pushes to it from then on";
}

// The job's sample budget is the servers' (docs/architecture.md, "The asynchronous phase's
// budget"): the step whose reply shows it spent tells the worker to stop.
TEST_F(PushPullInMemoryTest, TheStepWhoseReplyShowsTheBudgetSpentEndsTraining) {
  ASSERT_NO_FATAL_FAILURE(StartAgainst(Store(1, "asp", /*sample_budget=*/3 * kBatch)));
  for (int64_t step = 0; step < 3; ++step) {
    absl::StatusOr<StepOutcome> outcome = Step(*sync_, step);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->has_budget);
    EXPECT_EQ(outcome->budget_spent, step == 2) << "step " << step;
  }
}

// A BSP round needs every worker's push: a lone worker's exchange ends at its deadline, and the
// error names the server and what it waited for.
TEST_F(PushPullInMemoryTest, AnExchangeThatCannotCompleteEndsAtTheDeadlineNamingTheServer) {
  ASSERT_NO_FATAL_FAILURE(
      StartAgainst(Store(/*workers=*/2, "bsp"), std::chrono::milliseconds(200)));
  const absl::Status s = Step(*sync_, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("push/pull with parameter server 0 (in-memory-0)"),
            absl::string_view::npos)
      << s;
}

// A push the server refuses (a gradient that is not finite) changes nothing there, is counted,
// and comes back naming the server and the worker.
TEST_F(PushPullInMemoryTest, ANonFinitePushIsRefusedNamingTheServerAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartAgainst(Store(1, "asp")));
  ASSERT_TRUE(trainer_->ComputeGradients(0).ok());
  trainer_->gradient_data()[0] = std::numeric_limits<float>::quiet_NaN();
  const absl::Status s = sync_->Step(*trainer_, {0, 0, kBatch}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("parameter server 0 (in-memory-0)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("worker 0"), absl::string_view::npos) << s;
  const PartitionStatus status = store_->Status();
  EXPECT_EQ(status.version, 0);
  EXPECT_EQ(status.rejected_pushes, 1);
}

}  // namespace
}  // namespace strata::testing
