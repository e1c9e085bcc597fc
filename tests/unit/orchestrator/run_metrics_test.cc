// RunMetrics: the orchestrator's /metrics says what status.json says (restarts per service, the
// phase, the switch, the services alive, the run's start and age), and writes its port file.
#include "orchestrator/record/run_metrics.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

namespace strata {
namespace {

std::string TempDir() {
  char pattern[] = "/tmp/run-metrics-test-XXXXXX";
  const char* dir = ::mkdtemp(pattern);
  return dir == nullptr ? "/tmp" : dir;
}

// "name{labels}" -> value, of the strata_ lines of an exposition.
std::map<std::string, double> Samples(const std::string& exposition) {
  std::map<std::string, double> out;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("strata_", 0) != 0) continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::atof(line.c_str() + space + 1);
  }
  return out;
}

RunStatusSnapshot Running() {
  RunStatusSnapshot s;
  s.state = "running";
  s.phase = "allreduce";
  s.epoch = 1.5;
  ProcessSnapshot worker;
  worker.name = "worker-1";
  worker.running = true;
  worker.restarts = 2;
  ProcessSnapshot ps;
  ps.name = "ps-0";
  ps.running = false;
  s.processes = {worker, ps};
  return s;
}

// Broken on purpose once, to see this test fail: the restarts taken from the wrong process
// (always 0) made strata_restarts_total{process="worker-1"} read 0 instead of 2.
TEST(RunMetrics, ServesWhatStatusJsonSays) {
  const std::string dir = TempDir();
  MetricsEndpointOptions o;
  o.listen = "127.0.0.1:0";
  o.port_file = dir + "/orchestrator.metrics.port";
  auto metrics = RunMetrics::Start(o, 1000.0);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::ifstream port_file(o.port_file);
  int port = 0;
  port_file >> port;
  EXPECT_GT(port, 0);
  EXPECT_EQ((*metrics)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");

  (*metrics)->Update(Running());
  auto samples = Samples((*metrics)->Exposition());
  EXPECT_EQ(samples["strata_restarts_total{process=\"worker-1\"}"], 2);
  EXPECT_EQ(samples["strata_restarts_total{process=\"ps-0\"}"], 0);
  EXPECT_EQ(samples["strata_run_processes_running"], 1);
  EXPECT_EQ(samples["strata_run_phase{phase=\"allreduce\"}"], 1);
  EXPECT_EQ(samples["strata_run_phase{phase=\"ps\"}"], 0);
  EXPECT_EQ(samples["strata_run_phase{phase=\"done\"}"], 0);
  EXPECT_EQ(samples["strata_run_switches_total"], 0);
  EXPECT_EQ(samples["strata_run_epoch"], 1.5);
  EXPECT_EQ(samples["strata_run_start_time_seconds"], 1000);
  EXPECT_GT(samples["strata_run_seconds"], 0);  // live: now less the start in 1970

  // The switch done, then the run over: phase done, its age frozen at its wall time.
  RunStatusSnapshot s = Running();
  s.phase = "ps";
  s.switched = true;
  (*metrics)->Update(s);
  samples = Samples((*metrics)->Exposition());
  EXPECT_EQ(samples["strata_run_phase{phase=\"ps\"}"], 1);
  EXPECT_EQ(samples["strata_run_phase{phase=\"allreduce\"}"], 0);
  EXPECT_EQ(samples["strata_run_switches_total"], 1);
  s.state = "succeeded";
  s.wall_s = 42;
  (*metrics)->Update(s);
  samples = Samples((*metrics)->Exposition());
  EXPECT_EQ(samples["strata_run_phase{phase=\"done\"}"], 1);
  EXPECT_EQ(samples["strata_run_phase{phase=\"ps\"}"], 0);
  EXPECT_EQ(samples["strata_run_seconds"], 42);
  std::system(("rm -rf " + dir).c_str());
}

TEST(RunMetrics, AListenAddressInUseIsAnErrorNamingIt) {
  MetricsEndpointOptions o;
  o.listen = "127.0.0.1:0";
  auto first = RunMetrics::Start(o, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string url = (*first)->url();
  const std::string taken = url.substr(7, url.find("/metrics") - 7);  // 127.0.0.1:PORT
  o.listen = taken;
  auto second = RunMetrics::Start(o, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status();
}

}  // namespace
}  // namespace strata
