// `strata supervise` against services it did not start, the way docker-compose and Kubernetes run
// them (here: child processes of the test on loopback, the sharder run first as a one-shot step,
// every process given the same run token in its environment). The orchestrator waits for each to
// answer the standard health check, trains, evaluates and stops them, and writes the run record;
// addresses that do not match the job are refused before anything starts.
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "services/common/process/child_process.h"
#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

using std::chrono::seconds;

constexpr char kJob[] = R"(name: supervised
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 500 }
model: { arch: mlp }
training: { epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.9 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: { kind: allreduce }
launcher: { kind: compose }
)";

class Supervise : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("supervise");
    run_ = dir_ + "/run";
    job_ = dir_ + "/job.yaml";
    WriteText(job_, kJob);
  }
  void TearDown() override {
    std::vector<ChildProcess*> all;
    for (auto& c : children_) all.push_back(c.get());
    TerminateAll(all, seconds(5));
  }

  std::unique_ptr<ChildProcess> Spawn(const std::string& name, std::vector<std::string> argv) {
    SpawnOptions o;
    o.name = name;
    o.log_path = dir_ + "/" + name + ".log";
    o.argv = std::move(argv);
    auto child = ChildProcess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(*child) : nullptr;
  }

  // Starts a service on a free loopback port; returns host:port once it has reported it.
  std::string Serve(const std::string& name, const std::string& binary,
                    std::vector<std::string> args) {
    const std::string port_file = dir_ + "/" + name + ".port";
    std::vector<std::string> argv = {BinDir() + "/" + binary};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file});
    children_.push_back(Spawn(name, argv));
    if (!children_.back()) return "";
    auto port = WaitForPortFile(*children_.back(), port_file, seconds(180));
    EXPECT_TRUE(port.ok()) << port.status();
    return port.ok() ? absl::StrCat("127.0.0.1:", *port) : "";
  }

  std::string dir_, run_, job_;
  std::vector<std::unique_ptr<ChildProcess>> children_;
};

TEST_F(Supervise, DrivesServicesStartedByOthersToTheEndAndStopsThem) {
  // The one-shot step: the sharder writes the plan into the shared run directory.
  auto sharder = Spawn("sharder", {BinDir() + "/strata-sharder", "--config", job_, "--out",
                                   run_ + "/shards"});
  ASSERT_NE(sharder, nullptr);
  ASSERT_TRUE(sharder->WaitFor(seconds(180)));
  ASSERT_TRUE(sharder->succeeded()) << LogTail(sharder->log_path());

  std::vector<std::string> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(Serve(absl::StrCat("worker-", r), "strata-worker",
                            {"--config", job_, "--rank", std::to_string(r), "--world", "2",
                             "--shard-file", absl::StrCat(run_, "/shards/shard-", r, ".idx"),
                             "--run-dir", run_}));
    ASSERT_FALSE(workers.back().empty());
  }
  const std::string evaluator = Serve("evaluator", "strata-evaluator", {"--config", job_});
  ASSERT_FALSE(evaluator.empty());

  // The same token as the services: ChildProcess hands this process's to every child.
  auto supervise = Spawn("supervise", {Strata(), "supervise", job_, "--run-dir", run_,
                                       "--workers", workers[0] + "," + workers[1], "--evaluator",
                                       evaluator});
  ASSERT_NE(supervise, nullptr);
  ASSERT_TRUE(supervise->WaitFor(seconds(400))) << LogTail(supervise->log_path());
  const std::string output = Slurp(supervise->log_path());
  ASSERT_TRUE(supervise->succeeded()) << supervise->ExitDescription() << "\n" << output;
  EXPECT_NE(output.find("the sharder's plan: 2000 training examples"), std::string::npos) << output;
  EXPECT_NE(output.find("3 service(s) serving"), std::string::npos) << output;

  const nlohmann::json summary = ReadJson(run_ + "/summary.json");
  EXPECT_EQ(summary.value("state", ""), "succeeded") << summary.dump(2);
  EXPECT_GT(summary.value("final_val_acc", 0.0), 0.5) << summary.dump(2);
  EXPECT_TRUE(Exists(run_ + "/report.html"));
  // It stopped the services it was given: they exit on their own after the Stop RPC.
  for (auto& c : children_) {
    EXPECT_TRUE(c->WaitFor(seconds(60))) << c->name() << " still runs";
  }
}

TEST_F(Supervise, AddressesThatDoNotMatchTheJobAreRefusedBeforeAnythingStarts) {
  CommandResult r = RunCommand(Strata() + " supervise " + job_ + " --run-dir " + run_ +
                               " --workers 127.0.0.1:1 --evaluator 127.0.0.1:2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--workers gives 1 address(es) but the job has cluster.workers = 2"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(Exists(run_ + "/job.yaml"));
  // Without the services' token it cannot talk to them: refused, naming the variable.
  r = RunCommand("env -u STRATA_RUN_TOKEN " + Strata() + " supervise " + job_ + " --run-dir " +
                 run_ + " --workers 127.0.0.1:1,127.0.0.1:3 --evaluator 127.0.0.1:2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no run token: STRATA_RUN_TOKEN"), std::string::npos) << r.output;
  EXPECT_FALSE(Exists(run_ + "/job.yaml"));
}

}  // namespace
}  // namespace strata::testing
