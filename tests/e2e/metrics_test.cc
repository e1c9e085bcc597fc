// The services' Prometheus endpoints (docs/user-guide.md, "Watching a job"):
//  - a real Prometheus server (Debian's `prometheus`, started here on a free loopback port with a
//    configuration of the test's own) scrapes a real `strata run` of a switch job, and its HTTP
//    API answers with figures that agree with the run's own files: the steps and samples each
//    worker counted (summary.json), the phase before and after the switch, the evaluator's last
//    accuracy (metrics.jsonl);
//    The orchestrator's own endpoint is scraped in the same run: the phases and the switch as it
//    saw them, its services alive, its start time as events.jsonl has it;
//  - the orchestrator's endpoint counts a restart: a worker of a ps job with recovery on, killed
//    with SIGKILL, shows in strata_restarts_total{process="worker-1"} as Prometheus scraped it,
//    and `strata status` prints the endpoint;
//  - an endpoint accepts nothing but GET /metrics: other methods and paths, and bytes that are no
//    HTTP at all, change nothing and do not stop the service.
// Without the prometheus binary the Prometheus tests skip, saying so; under CI=true they fail.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/support/ci.h"
#include "tests/support/plain_http.h"

namespace strata::testing {
namespace {

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// A loopback port nobody listens on right now (bound to port 0, then released): for Prometheus,
// which reports no port it picked itself.
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// The `strata_` samples of an exposition (lines "name{labels} value"), name with labels -> value.
std::map<std::string, std::string> StrataSamples(const std::string& exposition) {
  std::map<std::string, std::string> samples;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 7, "strata_") != 0) continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = line.substr(space + 1);
  }
  return samples;
}

// A Prometheus server of the test's own: its configuration, its data and its log in `dir`,
// scraping every second the targets listed in `dir`/targets.json (file service discovery, which
// it re-reads when the file changes).
class PrometheusServer {
 public:
  explicit PrometheusServer(std::string dir) : dir_(std::move(dir)) {}

  // Empty when it serves; else what went wrong.
  std::string Start(const std::string& binary) {
    WriteText(dir_ + "/targets.json", "[]");
    WriteText(dir_ + "/prometheus.yml", R"(global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: strata
    file_sd_configs:
      - files: [')" + dir_ + R"(/targets.json']
        refresh_interval: 1s
)");
    // The port is free when picked; should another program take it before Prometheus binds it,
    // Prometheus exits and the next attempt picks another.
    for (int attempt = 0; attempt < 3; ++attempt) {
      port_ = FreeLoopbackPort();
      SpawnOptions o;
      o.name = "prometheus";
      o.argv = {binary, "--config.file=" + dir_ + "/prometheus.yml",
                "--storage.tsdb.path=" + dir_ + "/data",
                "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"};
      o.log_path = dir_ + "/prometheus.log";
      auto child = ChildProcess::Spawn(o);
      if (!child.ok()) return std::string(child.status().message());
      process_ = std::move(*child);
      const bool ready = Eventually(
          [&] { return process_->Poll() || HttpGetOnLoopback(port_, "/-/ready").status == 200; },
          std::chrono::seconds(120));
      if (ready && !process_->exited()) return "";
    }
    return "prometheus did not become ready: " + LogTail(dir_ + "/prometheus.log");
  }

  void SetTargets(const std::vector<std::string>& host_ports) {
    nlohmann::json targets = nlohmann::json::array();
    targets.push_back({{"targets", host_ports}});
    // Whole or not at all: Prometheus may read it at any moment.
    WriteText(dir_ + "/targets.json.tmp", targets.dump());
    std::rename((dir_ + "/targets.json.tmp").c_str(), (dir_ + "/targets.json").c_str());
  }

  // The instant vector of `expr` (an array of {metric, value: [time, "text"]}); null on error.
  nlohmann::json Query(const std::string& expr) {
    HttpResponse r = HttpGetOnLoopback(port_, "/api/v1/query?query=" + UrlEncode(expr));
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded() || j.value("status", "") != "success") return nullptr;
    return j["data"]["result"];
  }

  // `expr` by the value of `label` ("rank" -> value); empty on error.
  std::map<std::string, double> ByLabel(const std::string& expr, const std::string& label) {
    std::map<std::string, double> out;
    nlohmann::json result = Query(expr);
    if (!result.is_array()) return out;
    for (const auto& sample : result) {
      out[sample["metric"].value(label, "")] = std::stod(sample["value"][1].get<std::string>());
    }
    return out;
  }

  std::string Log() const { return LogTail(dir_ + "/prometheus.log"); }

 private:
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;  // its destructor ends Prometheus
};

// The host:port of every process's metrics endpoint in status.json, by process name.
std::map<std::string, std::string> MetricsEndpoints(const std::string& run_dir) {
  std::map<std::string, std::string> out;
  nlohmann::json status = ReadJson(run_dir + "/status.json");
  if (!status.is_object() || !status["processes"].is_array()) return out;
  for (const auto& p : status["processes"]) {
    if (!p.contains("metrics") || !p["metrics"].is_string()) continue;
    std::string url = p["metrics"].get<std::string>();  // http://127.0.0.1:PORT/metrics
    const std::string scheme = "http://";
    if (url.compare(0, scheme.size(), scheme) != 0) continue;
    url = url.substr(scheme.size());
    out[p.value("name", "")] = url.substr(0, url.find('/'));
  }
  return out;
}

// host:port of the orchestrator's own endpoint in status.json (empty until it is written).
std::string OrchestratorEndpoint(const std::string& run_dir) {
  nlohmann::json status = ReadJson(run_dir + "/status.json");
  if (!status.is_object() || !status["orchestrator_metrics"].is_string()) return "";
  std::string url = status["orchestrator_metrics"].get<std::string>();
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return "";
  url = url.substr(scheme.size());
  return url.substr(0, url.find('/'));
}

// The prometheus binary, or nullopt having skipped the test (failed under CI=true).
std::optional<std::string> PrometheusOrSkip() {
  const std::optional<std::string> prometheus = FindOnPath("prometheus");
  if (prometheus) return prometheus;
  const std::string why =
      "no prometheus on the PATH (Debian's prometheus package; scripts/install-deps.sh installs "
      "it)";
  if (InCi()) {
    ADD_FAILURE() << "CI must scrape a run with a real Prometheus: " << why;
  } else {
    std::printf("skipped: %s\n", why.c_str());
  }
  return std::nullopt;
}

// Broken on purpose once, to see this test fail: WorkerMetrics::StepDone counting each step
// twice made "worker 0 counted at most the steps it trained" fail (30004 > 15002 from
// summary.json), and the samples per step fall below the batch of 16.
//
// The orchestrator's part, broken on purpose once: RunMetrics never counting the switch
// (strata_run_switches_total left at 0) made max_over_time(strata_run_switches_total[1h]) read
// 0, not 1.
TEST(Metrics, PrometheusScrapesARunAndAgreesWithItsSummary) {
  const std::optional<std::string> prometheus = PrometheusOrSkip();
  if (!prometheus) GTEST_SKIP();
  const std::string dir = MakeTempDir("metrics-prometheus");
  PrometheusServer server(dir);
  ASSERT_EQ(server.Start(*prometheus), "");

  // A switch halfway through 8 epochs of 938 steps per worker: each phase lasts about ten seconds
  // here, many scrape intervals.
  RunFixture run(R"(name: metrics-e2e
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 60000, max_test: 1000 }
model: { arch: mlp }
training: { epochs: 8, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: { kind: switch, rule: at_fraction, at_fraction: 0.5 }
)");
  // Every service lists its endpoint in status.json once it has written its metrics port.
  const std::set<std::string> services = {"ps-0", "worker-0", "worker-1", "evaluator"};
  std::map<std::string, std::string> endpoints;
  ASSERT_TRUE(Eventually(
      [&] {
        endpoints = MetricsEndpoints(run.run_dir);
        const std::string orchestrator = OrchestratorEndpoint(run.run_dir);
        if (!orchestrator.empty()) endpoints["orchestrator"] = orchestrator;
        return endpoints.size() == services.size() + 1 || ProcessEnded(run.run->pid());
      },
      std::chrono::seconds(180)));
  ASSERT_EQ(endpoints.size(), services.size() + 1)
      << "status.json: " << Slurp(run.run_dir + "/status.json") << "\n"
      << run.run->Output();
  std::vector<std::string> targets;
  for (const auto& [name, host_port] : endpoints) {
    EXPECT_TRUE(services.count(name) || name == "orchestrator") << name;
    targets.push_back(host_port);
  }
  server.SetTargets(targets);

  // Prometheus scrapes all five while the run goes on.
  ASSERT_TRUE(Eventually([&] { return server.ByLabel("up == 1", "instance").size() == 5; },
                         std::chrono::seconds(300)))
      << "Prometheus never scraped every endpoint\n"
      << server.Log() << run.run->Output();
  ASSERT_EQ(run.run->Wait(std::chrono::seconds(600)), 0) << run.run->Output();

  // After the run: the last figures Prometheus scraped from each worker against summary.json.
  // A scrape can come before a worker's last steps, never after them: at most, and above the
  // steps of the ring phase alone.
  const nlohmann::json summary = ReadJson(run.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << run.run->Output();
  const auto steps = server.ByLabel("max_over_time(strata_worker_steps_total[1h])", "rank");
  const auto samples = server.ByLabel("max_over_time(strata_worker_samples_total[1h])", "rank");
  const auto steps_in_ring = server.ByLabel(
      "max_over_time((strata_worker_steps_total and "
      "strata_worker_phase == 0)[1h:1s])",
      "rank");
  ASSERT_EQ(summary["per_worker"].size(), 2u) << summary.dump(2);
  // Both workers were seen in the ring, then on the servers, the switch counted once each.
  EXPECT_EQ(server.ByLabel("min_over_time(strata_worker_phase[1h])", "rank"),
            (std::map<std::string, double>{{"0", 0}, {"1", 0}}));
  EXPECT_EQ(server.ByLabel("max_over_time(strata_worker_phase[1h])", "rank"),
            (std::map<std::string, double>{{"0", 1}, {"1", 1}}));
  EXPECT_EQ(server.ByLabel("max_over_time(strata_worker_switches_total[1h])", "rank"),
            (std::map<std::string, double>{{"0", 1}, {"1", 1}}));
  for (const auto& w : summary["per_worker"]) {
    const std::string rank = std::to_string(w["rank"].get<int>());
    const double trained = w["steps"].get<double>();
    ASSERT_TRUE(steps.count(rank)) << "rank " << rank;
    EXPECT_LE(steps.at(rank), trained)
        << "worker " << rank << " counted at most the steps it trained";
    EXPECT_GT(steps.at(rank), steps_in_ring.at(rank)) << "worker " << rank;
    EXPECT_GT(steps_in_ring.at(rank), 0) << "worker " << rank;
    // Each worker's batch is 16 examples (training.batch_size 32 over 2 workers); a shard's last
    // batch of an epoch may be smaller.
    EXPECT_LE(samples.at(rank), 16 * steps.at(rank)) << "worker " << rank;
    EXPECT_GT(samples.at(rank), 15 * steps.at(rank)) << "worker " << rank;
  }
  // The servers applied the pushes of the push/pull phase, each bumping the model's version.
  const auto version = server.ByLabel("max_over_time(strata_ps_model_version[1h])", "partition");
  const auto applied =
      server.ByLabel("max_over_time(strata_ps_updates_applied_total[1h])", "partition");
  ASSERT_TRUE(version.count("0") && applied.count("0"));
  EXPECT_GT(applied.at("0"), 0);
  EXPECT_GE(version.at("0"), applied.at("0"));

  // The evaluator's last scraped accuracy is one it reported to the run (metrics.jsonl).
  const auto evaluations =
      server.ByLabel("max_over_time(strata_evaluator_evaluations_total[1h])", "");
  const auto accuracy = server.ByLabel("last_over_time(strata_evaluator_val_accuracy[1h])", "");
  ASSERT_TRUE(evaluations.count("") && accuracy.count(""));
  EXPECT_GE(evaluations.at(""), 1);
  bool reported = false;
  for (const auto& m : ReadLines(run.run_dir + "/metrics.jsonl")) {
    reported = reported || std::fabs(m["val_acc"].get<double>() - accuracy.at("")) < 1e-9;
  }
  EXPECT_TRUE(reported) << "val accuracy " << accuracy.at("") << " is in no line of metrics.jsonl";

  // The orchestrator saw the ring, then the servers, and switched once; its four services lived
  // together; it started when events.jsonl says the run did.
  // (Whether a scrape caught it starting, or done in the moment before it exited, is chance.)
  EXPECT_EQ(server.ByLabel("max_over_time(strata_run_phase{phase=~\"allreduce|ps\"}[1h])", "phase"),
            (std::map<std::string, double>{{"allreduce", 1}, {"ps", 1}}))
      << "the orchestrator's phases over the run";
  EXPECT_EQ(server.ByLabel("max_over_time(strata_run_switches_total[1h])", ""),
            (std::map<std::string, double>{{"", 1}}));
  EXPECT_EQ(server.ByLabel("max_over_time(strata_run_processes_running[1h])", ""),
            (std::map<std::string, double>{{"", 4}}));
  EXPECT_EQ(server.ByLabel("max_over_time(strata_restarts_total[1h])", "process"),
            (std::map<std::string, double>{
                {"evaluator", 0}, {"ps-0", 0}, {"worker-0", 0}, {"worker-1", 0}}));
  const auto started = server.ByLabel("last_over_time(strata_run_start_time_seconds[1h])", "");
  ASSERT_TRUE(started.count(""));
  for (const auto& e : ReadLines(run.run_dir + "/events.jsonl")) {
    if (e.value("event", "") != "run_started") continue;
    // Both are the same instant read off the same clocks, microseconds apart.
    EXPECT_NEAR(started.at(""), e["time"].get<double>() - e["wall_s"].get<double>(), 2.0);
  }
  RunCommand("rm -rf " + dir);
}

// Broken on purpose once, to see this test fail: LocalLauncher::Snapshot leaving
// ProcessSnapshot::restarts at 0 made Prometheus never see strata_restarts_total{process=
// "worker-1"} reach 1 (the poll ran out with the series at 0 throughout).
TEST(Metrics, TheOrchestratorsEndpointCountsARestart) {
  const std::optional<std::string> prometheus = PrometheusOrSkip();
  if (!prometheus) GTEST_SKIP();
  const std::string dir = MakeTempDir("metrics-restart");
  PrometheusServer server(dir);
  ASSERT_EQ(server.Start(*prometheus), "");
  RunFixture run(SmallLongJob("metrics-restart", "{ kind: ps }", "recovery: { restarts: 1 }\n"));
  // The endpoint is up before the services start (status.json names it from the first write).
  std::string orchestrator;
  ASSERT_TRUE(Eventually(
      [&] {
        orchestrator = OrchestratorEndpoint(run.run_dir);
        return !orchestrator.empty() || ProcessEnded(run.run->pid());
      },
      std::chrono::seconds(180)));
  ASSERT_FALSE(orchestrator.empty()) << Slurp(run.run_dir + "/status.json") << run.run->Output();
  server.SetTargets({orchestrator});
  const int port = std::stoi(orchestrator.substr(orchestrator.find(':') + 1));
  EXPECT_EQ(Slurp(run.run_dir + "/ports/orchestrator.metrics.port"), std::to_string(port) + "\n");
  const CommandResult status = RunCommand(Strata() + " status " + run.run_dir);
  EXPECT_NE(status.output.find("metrics http://" + orchestrator + "/metrics"), std::string::npos)
      << status.output;

  // The evaluator is held (SIGSTOP) until Prometheus has seen the restart, so that the run, whose
  // final evaluation waits for it, cannot end first however fast it trains. (An evaluation waits
  // for its evaluator up to its deadline; it once failed after gRPC's 20 s connect timeout, and
  // with it the run, before a loaded machine's Prometheus had scraped the restart.)
  int evaluator = 0;
  ASSERT_TRUE(Eventually([&] { return (evaluator = run.PidOf("evaluator")) > 0; },
                         std::chrono::seconds(180)));
  ASSERT_EQ(::kill(evaluator, SIGSTOP), 0);
  struct Release {
    int pid;
    ~Release() { ::kill(pid, SIGCONT); }
  } release{evaluator};

  // Killed as the recovery tests kill it, with work left; no restart counted before.
  ASSERT_TRUE(run.WaitForTraining(40)) << run.run->Output();
  EXPECT_EQ(StrataSamples(HttpGetOnLoopback(port, "/metrics").body)
                .at("strata_restarts_total{process=\"worker-1\"}"),
            "0");
  const int pid = run.PidOf("worker-1");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(Eventually(
      [&] {
        return server.ByLabel("strata_restarts_total{process=\"worker-1\"}", "process") ==
               std::map<std::string, double>{{"worker-1", 1}};
      },
      std::chrono::seconds(300)))
      << "Prometheus never saw the restart\n"
      << server.Log() << Slurp(run.run_dir + "/events.jsonl");
  ::kill(evaluator, SIGCONT);
  ASSERT_EQ(run.run->Wait(std::chrono::seconds(600)), 0) << run.run->Output();
  EXPECT_EQ(ReadJson(run.run_dir + "/summary.json")["restarts"], 1);
  EXPECT_EQ(server.ByLabel("max_over_time(strata_restarts_total[1h])", "process"),
            (std::map<std::string, double>{
                {"evaluator", 0}, {"ps-0", 0}, {"worker-0", 0}, {"worker-1", 1}}))
      << server.Log();
  EXPECT_EQ(server.ByLabel("max_over_time(strata_run_phase{phase=\"ps\"}[1h])", "phase"),
            (std::map<std::string, double>{{"ps", 1}}));
  RunCommand("rm -rf " + dir);
}

// Broken on purpose once, to see this test fail: the endpoint answering every method made it
// answer 200 to POST, PUT and DELETE /metrics.
TEST(Metrics, TheEndpointAcceptsNothingButGetMetrics) {
  const std::string dir = MakeTempDir("metrics-endpoint");
  const std::string port_file = dir + "/ps.metrics.port";
  SpawnOptions o;
  o.name = "ps-0";
  o.argv = {BinDir() + "/strata-ps",
            "--partition",
            "0",
            "--config",
            std::string(STRATA_TEST_SOURCE_DIR) + "/configs/fmnist-mlp.yaml",
            "--train-examples",
            "1000",
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            dir + "/ps.port",
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-port-file",
            port_file};
  o.log_path = dir + "/ps.log";
  auto child = ChildProcess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  auto port = WaitForPortFile(**child, port_file, std::chrono::seconds(60));
  ASSERT_TRUE(port.ok()) << port.status();
  const HttpResponse first = HttpGetOnLoopback(*port, "/metrics");
  ASSERT_EQ(first.status, 200);
  const std::map<std::string, std::string> before = StrataSamples(first.body);
  EXPECT_EQ(before.at("strata_ps_model_version{partition=\"0\"}"), "0");

  // A TLS ClientHello's first bytes, a NUL and a byte no text has.
  static const char kNotHttp[] = "\x16\x03\x01\x00\xff not http at all\r\n\r\n";
  const std::string body = "strata_ps_model_version{partition=\"0\"} 99\n";
  const std::vector<std::string> requests = {
      "POST /metrics HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
          body,
      "PUT /metrics HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      "DELETE /metrics HTTP/1.0\r\n\r\n",
      "GET / HTTP/1.0\r\n\r\n",
      "GET /etc/passwd HTTP/1.0\r\n\r\n",
      "GET /../../etc/passwd HTTP/1.0\r\n\r\n",
      "GET /metrics/../ps.port HTTP/1.0\r\n\r\n",
      std::string(kNotHttp, sizeof kNotHttp - 1),
      "GET /metrics HTTP/1.0\r\n" + std::string(100000, 'X') + "\r\n\r\n",
  };
  for (const std::string& request : requests) {
    const HttpResponse r = ParseHttpResponse(ExchangeOnLoopback(*port, request));
    const std::string shown = request.substr(0, 30);
    EXPECT_NE(r.status, 200) << "answered 200 to: " << shown << "\n" << r.body;
    EXPECT_EQ(r.body.find("strata_"), std::string::npos) << shown;
  }
  // Still serving, the same figures, the process alive.
  const HttpResponse after = HttpGetOnLoopback(*port, "/metrics");
  ASSERT_EQ(after.status, 200) << LogTail(o.log_path);
  EXPECT_EQ(StrataSamples(after.body), before);
  EXPECT_FALSE((*child)->Poll()) << (*child)->ExitDescription() << "\n" << LogTail(o.log_path);
  (*child)->Signal(SIGTERM);
  EXPECT_TRUE((*child)->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE((*child)->succeeded()) << (*child)->ExitDescription();
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
