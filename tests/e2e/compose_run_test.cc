// End to end on the suite's own Docker daemon (the `docker` CTest fixture): the quickstart job as
// a docker-compose project, `strata run --set launcher.kind=compose`. Every service is a container
// with its own network namespace, so the ring, the push/pull and the handover cross a real
// (virtual) network, and the orchestrator is `strata supervise` in a container of its own. After
// success and after Ctrl-C nothing of the project may be left: no container, network or volume.
// The same job with security.tls mutual runs in containers too. The machine's faults come first: no
// daemon, no image, each refused with exit 2.
#include <signal.h>
#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "tests/docker/docker_test_env.h"
#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/support/ci.h"

namespace strata::testing {
namespace {

std::string Quickstart() {
  return std::string(STRATA_TEST_SOURCE_DIR) + "/configs/quickstart.yaml";
}

class ComposeRun : public ::testing::Test {
 protected:
  void SetUp() override {
    docker_ = GetDockerTestEnv();
    if (!docker_.unavailable.empty()) STRATA_UNAVAILABLE(docker_.unavailable);
    ::setenv("DOCKER_HOST", docker_.host.c_str(), 1);
  }
  // What the daemon still has of the project `strata run` made for `run_dir` (it writes the
  // project's name into compose/project).
  std::string Leftovers(const std::string& run_dir) const {
    std::string project = Slurp(run_dir + "/compose/project");
    while (!project.empty() && project.back() == '\n') project.pop_back();
    EXPECT_FALSE(project.empty()) << run_dir << "/compose/project";
    const std::string filter = " --filter label=com.docker.compose.project=" + project;
    std::string out;
    for (const char* what : {"ps -aq", "network ls -q", "volume ls -q"}) {
      CommandResult r = RunCommand(std::string("docker ") + what + filter);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      out += r.output;
    }
    return out;
  }
  DockerTestEnv docker_;
};

TEST_F(ComposeRun, QuickstartRunsAsAComposeProjectSwitchesLiveAndLeavesNothing) {
  const std::string dir = MakeTempDir("compose-quickstart") + "/run";
  CommandResult r =
      RunCommand(Strata() + " run " + Quickstart() + " --set launcher.kind=compose --image " +
                 docker_.image + " --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The orchestrator's own progress, as a local run prints it.
  EXPECT_NE(r.output.find("strata supervise: quickstart"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("switched to parameter servers at step"), std::string::npos) << r.output;
  const nlohmann::json summary = ReadJson(dir + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << r.output;
  EXPECT_EQ(summary.value("state", ""), "succeeded");
  EXPECT_GE(summary.value("final_val_acc", 0.0), 0.85) << summary.dump(2);
  bool switched = false;
  for (const nlohmann::json& e : ReadLines(dir + "/events.jsonl")) {
    if (e.value("event", "") == "switch_done") switched = true;
  }
  EXPECT_TRUE(switched) << Slurp(dir + "/events.jsonl");
  for (const char* service :
       {"sharder", "ps-0", "worker-0", "worker-1", "evaluator", "orchestrator"}) {
    EXPECT_TRUE(Exists(dir + "/logs/" + service + ".log")) << service;
  }
  // Containers do not share a pid namespace: the workers find the server's shared region out of
  // reach and keep the tensors on the TCP connection.
  for (const char* worker : {"worker-0", "worker-1"}) {
    const std::string log = Slurp(dir + "/logs/" + std::string(worker) + ".log");
    EXPECT_NE(log.find("is not on this host"), std::string::npos) << log;
    EXPECT_EQ(log.find("tensors move through shared memory"), std::string::npos) << log;
  }
  EXPECT_EQ(Leftovers(dir), "");
  EXPECT_FALSE(Exists(dir + "/compose/run-token")) << "the token outlived the run";
}

// security.tls mutual in containers: the one-shot step makes the run's certificates in the run
// volume, every service serves and calls only with them, the health checks are TLS clients, and
// `strata supervise` trusts the same CA. The whole quickstart job (ring, handover, push/pull over
// gRPC, as under TLS locally) runs to the end; the certificates do not outlive it.
TEST_F(ComposeRun, MutualTlsCarriesTheWholeJobInContainers) {
  const std::string dir = MakeTempDir("compose-tls") + "/run";
  CommandResult r =
      RunCommand(Strata() + " run " + Quickstart() +
                 " --set launcher.kind=compose --set security.tls=mutual --image " + docker_.image +
                 " --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output << Slurp(dir + "/logs/sharder.log");
  const nlohmann::json summary = ReadJson(dir + "/summary.json");
  EXPECT_EQ(summary.value("state", ""), "succeeded") << summary.dump(2);
  std::string tls;
  bool switched = false;
  for (const nlohmann::json& e : ReadLines(dir + "/events.jsonl")) {
    if (e.contains("tls") && e["tls"].is_string()) tls = e["tls"].get<std::string>();
    if (e.value("event", "") == "switch_done") switched = true;
  }
  EXPECT_EQ(tls, "mutual") << Slurp(dir + "/events.jsonl");
  EXPECT_TRUE(switched) << Slurp(dir + "/events.jsonl");
  // Each service started with the certificates the one-shot step made (a service that cannot
  // load them exits 2 naming the file, and the run fails).
  EXPECT_NE(Slurp(dir + "/logs/sharder.log").find("certificates for 'strata' written to "
                                                  "/run/strata/tls"),
            std::string::npos)
      << Slurp(dir + "/logs/sharder.log");
  for (const char* worker : {"worker-0", "worker-1"}) {
    const std::string log = Slurp(dir + "/logs/" + std::string(worker) + ".log");
    EXPECT_EQ(log.find("tensors move through shared memory"), std::string::npos) << log;
  }
  EXPECT_FALSE(Exists(dir + "/tls")) << "the run's certificates outlived it";
  EXPECT_EQ(Leftovers(dir), "");
}

TEST_F(ComposeRun, CtrlCStopsTheProjectAndRemovesIt) {
  const std::string dir = MakeTempDir("compose-interrupt") + "/run";
  BackgroundRun run({"run", Quickstart(), "--set", "launcher.kind=compose", "--image",
                     docker_.image, "--out", dir},
                    dir + ".out");
  // Training has begun (or the run ended early, which fails the test at once).
  auto training = [&] { return run.Output().find("epoch   1/") != std::string::npos; };
  ASSERT_TRUE(Eventually([&] { return training() || run.Wait(std::chrono::seconds(1)) >= 0; },
                         std::chrono::seconds(600)));
  ASSERT_TRUE(training()) << run.Output();
  ::kill(run.pid(), SIGINT);
  EXPECT_EQ(run.Wait(std::chrono::seconds(300)), 130) << run.Output();
  EXPECT_EQ(Leftovers(dir), "") << run.Output();
  const nlohmann::json summary = ReadJson(dir + "/summary.json");
  EXPECT_EQ(summary.value("state", ""), "interrupted") << run.Output();
}

// Needs no daemon, so it runs (and counts) where there is none.
TEST(ComposeRefused, ANonexistentDaemonAndAKubernetesJobAreRefusedAndNothingRuns) {
  const std::string base = MakeTempDir("compose-refused");
  CommandResult r =
      RunCommand("DOCKER_HOST=unix://" + base + "/no-daemon.sock " + Strata() + " run " +
                 Quickstart() + " --set launcher.kind=compose --out " + base + "/a");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot reach the Docker daemon at DOCKER_HOST=unix://" + base),
            std::string::npos)
      << r.output;
  // A Kubernetes job is not for `strata run`.
  r = RunCommand(Strata() + " run " + Quickstart() + " --set launcher.kind=kubernetes --out " +
                 base + "/c");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("strata submit"), std::string::npos) << r.output;
  RunCommand("rm -rf " + base);
}

TEST_F(ComposeRun, AnImageTheDaemonLacksIsRefusedAndNothingRuns) {
  const std::string base = MakeTempDir("compose-refused");
  // No build directory beside the binaries to build the image from: refused, naming the image.
  CommandResult r =
      RunCommand(Strata() + " run " + Quickstart() +
                 " --set launcher.kind=compose --image strata:no-such-tag --bin-dir " + base +
                 " --out " + base + "/b");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the image strata:no-such-tag is not in the Docker daemon"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(Leftovers(base + "/b"), "");
}

}  // namespace
}  // namespace strata::testing
