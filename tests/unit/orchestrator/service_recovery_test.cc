// The recovery of dead processes over a fake launcher (the fault bed: it reports the exits the
// test injects, records restarts and says a restarted service listens only when the test says
// so) and a FakeClusterClient: which exits a run survives, how a restarted worker rejoins, what a
// restarted server reports, and the bounds (restarts per service, the rejoin deadline). Also the
// supervisor's loop with a recovery: a worker killed in the asynchronous phase does not end the
// run. No process or socket.
#include "orchestrator/run/service_recovery.h"

#include <stdlib.h>

#include <set>

#include <gtest/gtest.h>

#include "orchestrator/run/run_supervisor.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"
#include "tests/support/temp_dir_test.h"
#include "tests/unit/orchestrator/fake_cluster_client.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using testing::FakeClusterClient;

class FakeLauncher final : public Launcher {
 public:
  absl::Status RunTask(const TaskSpec&, milliseconds,
                       const std::function<absl::Status()>&) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status Start(const ServiceSpec&) override { return absl::UnimplementedError("fake"); }
  absl::StatusOr<std::vector<Endpoint>> WaitReady(milliseconds,
                                                  const std::function<absl::Status()>&) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status CheckExits() override { return absl::OkStatus(); }
  std::vector<ServiceExit> TakeExits() override { return std::exchange(exits, {}); }
  absl::Status Restart(const std::string& service) override {
    restarted.push_back(service);
    if (listen_at_once) {
      listening.insert(service);
    } else {
      listening.erase(service);
    }
    return refuse_restart;
  }
  bool Listening(const std::string& service) override { return listening.count(service) > 0; }
  bool Running(const std::string&) override { return true; }
  void StopAll(milliseconds) override {}
  std::vector<ProcessSnapshot> Snapshot() override { return {}; }

  // Injects the death of `service` as the launcher would report it.
  void Kill(const std::string& service, ServiceRole role);

  std::vector<ServiceExit> exits;
  std::vector<std::string> restarted;
  std::set<std::string> listening;
  absl::Status refuse_restart = absl::OkStatus();
  bool listen_at_once = false;  // a restarted service listens by the next pass
};

ServiceExit Death(const std::string& service, ServiceRole role) {
  return {service, role, "killed by signal 9 (Killed)",
          absl::AbortedError(service + " (pid 42) killed by signal 9 (Killed)")};
}

void FakeLauncher::Kill(const std::string& service, ServiceRole role) {
  exits.push_back(Death(service, role));
}

// A recovery over the fake launcher and cluster client, with a run record in a scratch folder.
class RecoveryTestBase : public testing::TempDirTest {
 protected:
  RecoveryTestBase(int workers, int servers)
      : testing::TempDirTest("service-recovery"), client_(workers, servers) {
    dir_ = temp_dir();
    record_ = *RunRecord::Open(dir_, Clock::now());
    view_.workers.resize(workers);
    options_.max_restarts = 2;
    options_.rejoin_timeout = milliseconds(60000);
  }

  // Once options_ are set.
  void MakeRecovery() {
    recovery_ = std::make_unique<ServiceRecovery>(options_, launcher_, client_, *record_, failure_);
  }

  std::vector<nlohmann::json> Events(const std::string& name) {
    std::vector<nlohmann::json> out;
    auto lines = ReadJsonLines(RunPaths(dir_).events);
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (!lines.ok()) return out;
    for (const auto& e : *lines) {
      if (e["event"] == name) out.push_back(e);
    }
    return out;
  }

  std::string dir_;
  FakeClusterClient client_;
  FakeLauncher launcher_;
  RunFailure failure_;
  std::unique_ptr<RunRecord> record_;
  ClusterView view_;
  RecoveryOptions options_;
  std::unique_ptr<ServiceRecovery> recovery_;
};

// Two workers and a server in the asynchronous phase.
class ServiceRecoveryTest : public RecoveryTestBase {
 protected:
  ServiceRecoveryTest() : RecoveryTestBase(2, 1) {
    view_.workers[0].set_step(150);
    view_.workers[1].set_step(170);
    options_.ps_start.set_mode(v1::SYNC_MODE_PS);
    options_.ps_start.add_parameter_servers("127.0.0.1:9");
    options_.ps_start.set_steps_per_epoch(100);
    MakeRecovery();
  }

  static constexpr RecoveryWindow kAsynchronous{true, false};
};

TEST_F(ServiceRecoveryTest, AWorkerThatDiesInTheAsynchronousPhaseRejoinsWhereItsCountStopped) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous, t0).ok())
      << failure_.status();
  EXPECT_EQ(launcher_.restarted, std::vector<std::string>{"worker-1"});
  EXPECT_TRUE(recovery_->recovering("worker-1"));
  // Not listening yet: nothing is sent.
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_TRUE(client_.start_requests.empty());
  launcher_.listening.insert("worker-1");
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  ASSERT_EQ(client_.start_requests.size(), 1u);
  EXPECT_EQ(client_.start_requests[0].first, 1);
  const v1::StartRequest& start = client_.start_requests[0].second;
  EXPECT_EQ(start.mode(), v1::SYNC_MODE_PS);
  EXPECT_EQ(start.first_step(), 170);
  EXPECT_EQ(start.parameter_servers(0), "127.0.0.1:9");
  EXPECT_FALSE(recovery_->recovering("worker-1"));
  EXPECT_EQ(recovery_->restarts(), 1);
  auto restarts = Events("restart");
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0]["process"], "worker-1");
  EXPECT_EQ(restarts[0]["reason"], "killed by signal 9 (Killed)");
  auto rejoined = Events("rejoined");
  ASSERT_EQ(rejoined.size(), 1u);
  EXPECT_EQ(rejoined[0]["first_step"], 170);
}

TEST_F(ServiceRecoveryTest, AStartThatFindsTheWorkerNotYetServingIsTriedAgain) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      recovery_->OnExit(Death("worker-0", ServiceRole::kWorker), view_, kAsynchronous, t0).ok());
  launcher_.listening.insert("worker-0");
  client_.refuse_starts = absl::UnavailableError("connection refused");
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_TRUE(recovery_->recovering("worker-0"));
  client_.refuse_starts = absl::OkStatus();
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_FALSE(recovery_->recovering("worker-0"));
  EXPECT_EQ(client_.start_requests.size(), 2u);
}

TEST_F(ServiceRecoveryTest, AWorkerThatDiesInTheRingEndsTheRunNamingItAndWhy) {
  absl::Status s = recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_,
                                     RecoveryWindow{false, false}, Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "worker-1");
  EXPECT_NE(s.message().find("killed by signal 9"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ring all-reduce"), std::string::npos) << s;
  EXPECT_TRUE(launcher_.restarted.empty());
}

TEST_F(ServiceRecoveryTest, AnyDeathDuringASwitchEndsTheRun) {
  absl::Status s = recovery_->OnExit(Death("ps-0", ServiceRole::kParameterServer), view_,
                                     RecoveryWindow{false, true}, Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "ps-0");
  EXPECT_NE(s.message().find("switch"), std::string::npos) << s;
  EXPECT_TRUE(launcher_.restarted.empty());
}

TEST_F(ServiceRecoveryTest, TheEvaluatorIsNotRestarted) {
  absl::Status s = recovery_->OnExit(Death("evaluator", ServiceRole::kEvaluator), view_,
                                     kAsynchronous, Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "evaluator");
}

TEST_F(ServiceRecoveryTest, AWorkerThatHadFinishedTrainingIsNotRestarted) {
  view_.workers[1].set_finished(true);
  absl::Status s = recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous,
                                     Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("finished training"), std::string::npos) << s;
}

TEST_F(ServiceRecoveryTest, EachServiceIsRestartedAtMostRecoveryRestartsTimes) {
  const auto t0 = Clock::now();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous, t0).ok());
    launcher_.listening.insert("worker-1");
    ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  }
  // Another service still has its own allowance.
  ASSERT_TRUE(
      recovery_->OnExit(Death("worker-0", ServiceRole::kWorker), view_, kAsynchronous, t0).ok());
  absl::Status s =
      recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous, t0);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "worker-1");
  EXPECT_NE(s.message().find("restarted 2 time(s) already"), std::string::npos) << s;
  EXPECT_EQ(recovery_->restarts(), 3);
}

TEST_F(ServiceRecoveryTest, NoRestartsAllowedMeansEveryDeathEndsTheRun) {
  options_.max_restarts = 0;
  ServiceRecovery none(options_, launcher_, client_, *record_, failure_);
  absl::Status s =
      none.OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous, Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recovery.restarts is 0"), std::string::npos) << s;
}

TEST_F(ServiceRecoveryTest, ARestartThatFailsEndsTheRunWithBothReasons) {
  launcher_.refuse_restart = absl::UnavailableError("cannot bind 127.0.0.1:4242");
  absl::Status s = recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous,
                                     Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("killed by signal 9"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cannot bind 127.0.0.1:4242"), std::string::npos) << s;
}

TEST_F(ServiceRecoveryTest, AWorkerThatNeverListensAgainFailsTheRunAtTheDeadline) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kAsynchronous, t0).ok());
  ASSERT_TRUE(recovery_->Step(view_, t0 + milliseconds(59000)).ok());
  absl::Status s = recovery_->Step(view_, t0 + milliseconds(61000));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(failure_.process(), "worker-1");
  EXPECT_NE(s.message().find("did not rejoin within 60 s"), std::string::npos) << s;
}

TEST_F(ServiceRecoveryTest, ARestartedServerReportsTheVersionItResumedAtAndTheUpdatesLost) {
  v1::ServerStatus before;
  before.set_version(500);
  recovery_->ObserveServer(0, before);
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      recovery_->OnExit(Death("ps-0", ServiceRole::kParameterServer), view_, kAsynchronous, t0)
          .ok());
  EXPECT_EQ(launcher_.restarted, std::vector<std::string>{"ps-0"});
  client_.server_statuses.resize(1);
  client_.server_statuses[0].set_version(420);
  client_.server_statuses[0].set_loaded(true);
  launcher_.listening.insert("ps-0");
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_FALSE(recovery_->recovering("ps-0"));
  EXPECT_TRUE(client_.start_requests.empty());  // servers are not started; workers reconnect
  auto rejoined = Events("rejoined");
  ASSERT_EQ(rejoined.size(), 1u);
  EXPECT_EQ(rejoined[0]["process"], "ps-0");
  EXPECT_EQ(rejoined[0]["resumed_version"], 420);
  EXPECT_EQ(rejoined[0]["last_version_seen"], 500);
  EXPECT_EQ(rejoined[0]["updates_lost"], 80);
}

// The supervisor's loop with a recovery: the host reports worker-1's death in the asynchronous
// phase; the run goes on, the worker is started again, and training ends normally.
class ScriptedHost final : public SupervisorHost {
 public:
  explicit ScriptedHost(FakeLauncher& launcher) : launcher_(launcher) {}
  absl::StatusOr<std::vector<ServiceExit>> CheckProcesses() override {
    return launcher_.TakeExits();
  }
  bool TakeSwitchRequest() override { return false; }
  void ShowProgress(const ClusterView&, Clock::time_point) override { ++ticks; }
  void RecordStatus(Clock::time_point, bool changed) override {
    if (changed) restarts_seen_at_record.push_back(static_cast<int>(launcher_.restarted.size()));
  }
  void StopAll() override {}
  int ticks = 0;
  std::vector<int> restarts_seen_at_record;  // the launcher's restarts at each forced record

 private:
  FakeLauncher& launcher_;
};

TEST_F(ServiceRecoveryTest, TheSupervisorKeepsARunWhoseWorkerDiedInTheAsynchronousPhase) {
  RunConsole console(true);
  RunPhase phase;
  phase.name = "ps";
  ClusterView view;
  view.planned_steps_per_epoch = 100;
  view.worker_batch = 32;
  view.epochs = 4;
  for (auto& s : client_.statuses) s.set_step(150), s.set_steps_per_epoch(100);
  client_.answer_evaluations = true;
  EvalSchedulerOptions e;
  e.epochs = 4;
  e.worker_address = "127.0.0.1:1";
  EvalScheduler eval(e, client_, *record_, console, phase);
  v1::ResolvedStrategy strategy;
  strategy.set_kind(v1::STRATEGY_KIND_PS);
  SwitchPolicy policy(strategy, 4, record_.get());
  SupervisorOptions so;
  so.worker_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  so.tick = milliseconds(1);
  so.unresponsive_timeout = milliseconds(1);  // silence while restarting must not count
  ScriptedHost host(launcher_);
  launcher_.Kill("worker-1", ServiceRole::kWorker);
  launcher_.listen_at_once = true;
  // Every worker has finished by the time it is polled; worker-1's death came first, so the run
  // ends only once it has been restarted and started again.
  for (auto& s : client_.statuses) s.set_finished(true), s.set_step(400);
  RunSupervisor supervisor(
      so, {client_, *record_, failure_, host, view, phase, eval, policy, nullptr, recovery_.get()});
  ASSERT_TRUE(supervisor.Run().ok()) << failure_.status();
  EXPECT_EQ(recovery_->restarts(), 1);
  ASSERT_EQ(client_.start_requests.size(), 1u);
  EXPECT_EQ(client_.start_requests[0].first, 1);
  EXPECT_EQ(Events("restart").size(), 1u);
  EXPECT_EQ(Events("rejoined").size(), 1u);
  EXPECT_FALSE(failure_.failed());
  // status.json and the metrics were written at once in the pass that restarted it: seen in CI,
  // a restart right before training ended never reached Prometheus, because the status waited
  // for the next second and then no more status was written until the run was over. Broken on
  // purpose once: RecordStatus always called with changed false left this list empty.
  EXPECT_EQ(host.restarts_seen_at_record, std::vector<int>{1});
}

// A ring of three workers in an all-reduce job, for the re-formed ring.
class RingRecoveryTest : public RecoveryTestBase {
 protected:
  RingRecoveryTest() : RecoveryTestBase(3, 0) {
    for (int r = 0; r < 3; ++r) view_.workers[r].set_step(170);
    options_.ring_start.set_mode(v1::SYNC_MODE_ALLREDUCE);
    for (int r = 0; r < 3; ++r) options_.ring_start.add_workers("127.0.0.1:" + std::to_string(r));
    options_.ring_start.set_steps_per_epoch(100);
    MakeRecovery();
  }

  // The survivors have given up the broken ring after `steps` completed steps each.
  void Broken(std::vector<int64_t> steps, uint32_t generation = 0) {
    for (int r = 0; r < 3; ++r) {
      view_.workers[r].set_step(steps[r]);
      view_.workers[r].set_ring_broken("the stream from rank 1 ended");
      view_.workers[r].set_ring_generation(generation);
    }
  }

  static constexpr RecoveryWindow kRing{false, false, true};
};

TEST_F(RingRecoveryTest, TheRingReformsAroundTheReplacementWithTheFurthestSurvivorsModel) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kRing, t0).ok())
      << failure_.status();
  EXPECT_EQ(launcher_.restarted, std::vector<std::string>{"worker-1"});
  // Every survivor is told at once, so that none waits on the dead peer until its deadline.
  ASSERT_EQ(client_.reform_requests.size(), 2u);
  for (const auto& [rank, request] : client_.reform_requests) {
    EXPECT_NE(rank, 1);
    EXPECT_EQ(request.lost_peer(), "worker-1");
    EXPECT_EQ(request.workers_size(), 0);
  }
  client_.reform_requests.clear();
  launcher_.listening.insert("worker-1");
  // Listening, but the survivors have not yet reported the ring broken: nothing is sent.
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_TRUE(client_.start_requests.empty());
  EXPECT_TRUE(client_.reform_requests.empty());
  // Worker 2 completed the step on which worker 0 failed: its model is the one to go on from.
  Broken({170, 0, 171});
  ASSERT_TRUE(recovery_->Step(view_, t0).ok()) << failure_.status();
  ASSERT_EQ(client_.start_requests.size(), 1u);
  EXPECT_EQ(client_.start_requests[0].first, 1);
  const v1::StartRequest& start = client_.start_requests[0].second;
  EXPECT_EQ(start.mode(), v1::SYNC_MODE_ALLREDUCE);
  EXPECT_EQ(start.workers_size(), 3);
  EXPECT_EQ(start.first_step(), 171);
  EXPECT_EQ(start.ring_generation(), 1u);
  EXPECT_EQ(start.ring_source_rank(), 2);
  ASSERT_EQ(client_.reform_requests.size(), 2u);
  for (const auto& [rank, request] : client_.reform_requests) {
    EXPECT_TRUE(rank == 0 || rank == 2) << rank;
    EXPECT_EQ(request.workers_size(), 3);
    EXPECT_EQ(request.source_rank(), 2);
    EXPECT_EQ(request.step(), 171);
    EXPECT_EQ(request.generation(), 1u);
  }
  EXPECT_FALSE(recovery_->recovering("worker-1"));
  auto rejoined = Events("rejoined");
  ASSERT_EQ(rejoined.size(), 1u);
  EXPECT_EQ(rejoined[0]["ring_generation"], 1);
  EXPECT_EQ(rejoined[0]["model_from"], "worker-2");
  EXPECT_EQ(rejoined[0]["first_step"], 171);

  // A second death later re-forms the ring again, once the survivors report the new generation.
  ASSERT_TRUE(recovery_->OnExit(Death("worker-0", ServiceRole::kWorker), view_, kRing, t0).ok());
  launcher_.listening.insert("worker-0");
  client_.reform_requests.clear();
  Broken({0, 400, 400}, 0);  // stale: still generation 0
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_EQ(client_.start_requests.size(), 1u);
  Broken({0, 400, 400}, 1);
  ASSERT_TRUE(recovery_->Step(view_, t0).ok()) << failure_.status();
  ASSERT_EQ(client_.start_requests.size(), 2u);
  EXPECT_EQ(client_.start_requests[1].second.ring_generation(), 2u);
  EXPECT_EQ(client_.start_requests[1].second.ring_source_rank(), 1);  // the first of the furthest
}

TEST_F(RingRecoveryTest, AReplacementNotYetServingIsStartedOnceAndTheSurvivorsAfterIt) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(recovery_->OnExit(Death("worker-2", ServiceRole::kWorker), view_, kRing, t0).ok());
  launcher_.listening.insert("worker-2");
  Broken({170, 170, 0});
  client_.reform_requests.clear();
  client_.refuse_starts = absl::UnavailableError("connection refused");
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_TRUE(client_.reform_requests.empty()) << "the survivors were sent the ring first";
  client_.refuse_starts = absl::OkStatus();
  ASSERT_TRUE(recovery_->Step(view_, t0).ok());
  EXPECT_EQ(client_.start_requests.size(), 2u);
  EXPECT_EQ(client_.reform_requests.size(), 2u);
  EXPECT_FALSE(recovery_->recovering("worker-2"));
}

TEST_F(RingRecoveryTest, SurvivorsMoreThanAStepApartEndTheRunSayingSo) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kRing, t0).ok());
  launcher_.listening.insert("worker-1");
  Broken({170, 0, 175});
  absl::Status s = recovery_->Step(view_, t0);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "worker-1");
  EXPECT_NE(s.message().find("5 steps apart"), std::string::npos) << s;
}

TEST_F(RingRecoveryTest, ASecondDeathWhileTheRingReformsEndsTheRun) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kRing, t0).ok());
  absl::Status s = recovery_->OnExit(Death("worker-2", ServiceRole::kWorker), view_, kRing, t0);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(failure_.process(), "worker-2");
  EXPECT_NE(s.message().find("still re-forming"), std::string::npos) << s;
  EXPECT_EQ(launcher_.restarted, std::vector<std::string>{"worker-1"});
}

TEST_F(RingRecoveryTest, AReplacementThatNeverRejoinsEndsTheRunAtTheDeadline) {
  const auto t0 = Clock::now();
  ASSERT_TRUE(recovery_->OnExit(Death("worker-1", ServiceRole::kWorker), view_, kRing, t0).ok());
  ASSERT_TRUE(recovery_->Step(view_, t0 + milliseconds(1000)).ok());
  absl::Status s = recovery_->Step(view_, t0 + milliseconds(61000));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("did not rejoin"), std::string::npos) << s;
}

}  // namespace
}  // namespace strata
