// Transport security against the real binaries (docs/security.md, "Transport security"): services
// started with --tls mutual answer only TLS clients that trust the run's CA and present a client
// certificate it signed (and still want the run token); under --tls on they need no client
// certificate but still prove who they are; a service given a bad or missing certificate exits 2
// naming the file; whole `strata run`s train with security.tls mutual (certificates made by the
// run) and on (a directory of the user's); the Kubernetes renderer carries TLS with the run's own
// certificates and TLS probes (compose runs it for real: tests/e2e/compose_run_test.cc).
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/tls.h"
#include "services/common/wire/tls_certificates.h"
#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/integration/orchestrator/run_observer.h"
#include "tests/integration/security/security_test_util.h"
#include "tests/integration/security/wire_watch.h"
#include "tests/support/ci.h"
#include "tests/support/plain_http.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::CommandResult;
using testing::RunCommand;
using testing::Strata;

constexpr char kJob[] = R"(name: tls-test
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 256, max_test: 100 }
model: { arch: mlp }
training: { epochs: 1, batch_size: 64 }
cluster: { workers: 1, parameter_servers: 1, threads_per_worker: 1 }
)";

// A short switch job: the ring (all-reduce), the handover to the servers, push/pull and the
// evaluator's fetches all travel between the services. The switch is aimed at the end of the
// first of three epochs (at_fraction 0.25): the orchestrator decides it from the workers' steps
// it has seen, and on a loaded machine it may see them late. Aimed at the end of the second
// (0.5, 188 steps in all), a full suite once ran this job to its end with no switch_done, most
// likely a switch decided so late that its step lay past the last one (skipped), and the test
// failed; two epochs of slack make that far less likely. The job stays small: with 3,000
// examples instead of 2,000 the loopback capture, then read through recvfrom, once fell behind (a
// dropped frame) in a full suite; it now reads a 262,144-frame ring (wire_watch.h). Starving the
// reader on purpose (a 1,024-frame ring, 300 us per frame) fails this test with "the capture fell
// behind" and first segments not seen.
constexpr char kRunJob[] =
    R"(dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 500 }
model: { arch: mlp }
training: { epochs: 3, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
strategy: { kind: switch, rule: at_fraction, at_fraction: 0.25 }
)";

std::string Bearer() { return "Bearer " + CurrentRpcAuth().token; }

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const TlsMaterial& m) {
  grpc::ChannelArguments args;
  SetTlsTargetName(m, &args);
  return grpc::CreateCustomChannel(address, TlsChannelCredentials(m), args);
}

std::shared_ptr<grpc::Channel> PlaintextChannel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// One harmless method per binary, to knock with.
const std::map<std::string, std::string>& StatusMethod() {
  static const auto* m = new std::map<std::string, std::string>{
      {"strata-ps", "/strata.v1.ParameterServer/GetStatus"},
      {"strata-worker", "/strata.v1.Worker/GetStatus"},
      {"strata-evaluator", "/strata.v1.Evaluator/GetStatus"},
      // Shard with an empty request is refused by the handler (INVALID_ARGUMENT), which still
      // shows the call got through transport and token.
      {"strata-sharder", "/strata.v1.Sharder/Shard"},
  };
  return *m;
}

bool ReachedTheHandler(const grpc::Status& status) {
  return status.ok() || status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
         status.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/strata-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/job.yaml", kJob).ok());
    tls_dir_ = dir_ + "/tls";
    other_dir_ = dir_ + "/other-ca";
    ASSERT_TRUE(WriteRunCertificates(tls_dir_, {}).ok());
    ASSERT_TRUE(WriteRunCertificates(other_dir_, {}).ok());
  }
  void TearDown() override {
    std::vector<ChildProcess*> all;
    for (auto& [name, s] : services_) all.push_back(s.process.get());
    TerminateAll(all, seconds(5));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  TlsMaterial Client(const std::string& dir, TlsMode mode) {
    TlsSettings settings;
    settings.mode = mode;
    settings.dir = dir;
    auto m = LoadTlsMaterial(settings, TlsUse::kClient);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : TlsMaterial();
  }

  struct Service {
    std::unique_ptr<ChildProcess> process;
    std::string address;
  };

  // Starts `binary` on 127.0.0.1:0 with --tls `mode` and this test's certificates.
  void Launch(const std::string& binary, std::vector<std::string> args, const std::string& mode) {
    SpawnOptions o;
    o.name = binary;
    o.log_path = dir_ + "/" + binary + ".log";
    const std::string port_file = dir_ + "/" + binary + ".port";
    o.argv = {Bin(binary)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file, "--tls", mode,
                                 "--tls-dir", tls_dir_});
    auto child = ChildProcess::Spawn(o);
    ASSERT_TRUE(child.ok()) << child.status();
    Service& s = services_[binary];
    s.process = std::move(*child);
    auto port = WaitForPortFile(*s.process, port_file, seconds(120));
    ASSERT_TRUE(port.ok()) << port.status() << "; log: " << LogTail(o.log_path);
    s.address = absl::StrCat("127.0.0.1:", *port);
  }

  void LaunchAll(const std::string& mode) {
    const std::string job = dir_ + "/job.yaml";
    ASSERT_NO_FATAL_FAILURE(
        Launch("strata-ps",
               {"--config", job, "--partition", "0", "--partitions", "1", "--workers", "1",
                "--train-examples", "256", "--sample-budget", "0"},
               mode));
    ASSERT_NO_FATAL_FAILURE(
        Launch("strata-worker", {"--config", job, "--rank", "0", "--world", "1", "--run-dir", dir_},
               mode));
    ASSERT_NO_FATAL_FAILURE(Launch("strata-evaluator", {"--config", job}, mode));
    ASSERT_NO_FATAL_FAILURE(Launch("strata-sharder", {"serve", "--run-dir", dir_}, mode));
  }

  std::string dir_, tls_dir_, other_dir_;
  std::map<std::string, Service> services_;  // by binary
};

TEST_F(TlsTest, MutualTlsAnswersOnlyClientsWithTheRunsCertificatesAndToken) {
  ASSERT_NO_FATAL_FAILURE(LaunchAll("mutual"));
  const TlsMaterial right = Client(tls_dir_, TlsMode::kMutual);
  TlsMaterial no_certificate = right;  // trusts the run's CA, presents nothing
  no_certificate.client_cert_pem.clear();
  no_certificate.client_key_pem.clear();
  TlsMaterial foreign_certificate = right;  // trusts the run's CA, presents another CA's client
  const TlsMaterial other = Client(other_dir_, TlsMode::kMutual);
  foreign_certificate.client_cert_pem = other.client_cert_pem;
  foreign_certificate.client_key_pem = other.client_key_pem;
  TlsMaterial wrong_name = right;  // expects another name in the server's certificate
  wrong_name.server_name = "not-the-run";

  for (auto& [binary, s] : services_) {
    const std::string& method = StatusMethod().at(binary);
    SCOPED_TRACE(binary + " " + method);
    // Plaintext, even with the right token: the server speaks TLS only.
    EXPECT_EQ(CallWithDefaultRequest(PlaintextChannel(s.address), method, Bearer()).error_code(),
              grpc::StatusCode::UNAVAILABLE);
    // TLS without a client certificate, with another CA's, or trusting another CA: the handshake
    // fails, whatever token the call would carry.
    const std::vector<const TlsMaterial*> refused = {&no_certificate, &foreign_certificate, &other,
                                                     &wrong_name};
    for (const TlsMaterial* m : refused) {
      const grpc::Status status =
          CallWithDefaultRequest(TlsChannel(s.address, *m), method, Bearer());
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << status.error_code() << " " << status.error_message();
    }
    // The run's certificates without the token: TLS does not replace the token check.
    const grpc::Status no_token = CallWithDefaultRequest(TlsChannel(s.address, right), method, "");
    EXPECT_EQ(no_token.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << no_token.error_code() << " " << no_token.error_message();
    // Both: the call reaches the handler.
    const grpc::Status ok = CallWithDefaultRequest(TlsChannel(s.address, right), method, Bearer());
    EXPECT_TRUE(ReachedTheHandler(ok)) << ok.error_code() << " " << ok.error_message();
  }

  // The health probe: with the run's client certificate it gets SERVING; without TLS, or without
  // the certificate, the handshake fails and the probe says the service is not healthy.
  const std::string ca_only = dir_ + "/ca-only";
  ASSERT_TRUE(MakeDirs(ca_only).ok());
  fs::copy_file(tls_dir_ + "/ca.pem", ca_only + "/ca.pem");
  for (auto& [binary, s] : services_) {
    const Exit probe =
        RunWithoutToken({Bin("strata-health"), s.address, "--tls", "mutual", "--tls-dir", tls_dir_},
                        dir_ + "/health.out");
    EXPECT_EQ(probe.code, 0) << binary << ": " << probe.output;
    EXPECT_TRUE(absl::StrContains(probe.output, "SERVING")) << binary << ": " << probe.output;
    const Exit plain = RunWithoutToken({Bin("strata-health"), s.address, "--deadline-s", "2"},
                                       dir_ + "/health-plain.out");
    EXPECT_EQ(plain.code, 1) << binary << ": " << plain.output;
    const Exit no_cert = RunWithoutToken(
        {Bin("strata-health"), s.address, "--deadline-s", "2", "--tls", "on", "--tls-dir", ca_only},
        dir_ + "/health-nocert.out");
    EXPECT_EQ(no_cert.code, 1) << binary << ": " << no_cert.output;
  }
}

TEST_F(TlsTest, TlsOnNeedsNoClientCertificateButTheServerMustProveItsName) {
  const std::string job = dir_ + "/job.yaml";
  ASSERT_NO_FATAL_FAILURE(
      Launch("strata-ps",
             {"--config", job, "--partition", "0", "--partitions", "1", "--workers", "1",
              "--train-examples", "256", "--sample-budget", "0"},
             "on"));
  const std::string address = services_.at("strata-ps").address;
  const std::string method = StatusMethod().at("strata-ps");
  TlsMaterial right = Client(tls_dir_, TlsMode::kOn);
  EXPECT_TRUE(right.client_cert_pem.empty());
  const grpc::Status ok = CallWithDefaultRequest(TlsChannel(address, right), method, Bearer());
  EXPECT_TRUE(ok.ok()) << ok.error_code() << " " << ok.error_message();
  EXPECT_EQ(CallWithDefaultRequest(TlsChannel(address, right), method, "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallWithDefaultRequest(PlaintextChannel(address), method, Bearer()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA, or expects another name, refuses the server.
  EXPECT_EQ(CallWithDefaultRequest(TlsChannel(address, Client(other_dir_, TlsMode::kOn)), method,
                                   Bearer())
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  TlsMaterial wrong_name = right;
  wrong_name.server_name = "not-the-run";
  EXPECT_EQ(CallWithDefaultRequest(TlsChannel(address, wrong_name), method, Bearer()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// A copy of the run's certificates named `name`, with `file` replaced by `text`, or by a copy of
// the file `from` (a path), or removed when both are empty.
std::string Variant(const std::string& tls_dir, const std::string& name, const std::string& file,
                    const std::string& text, const std::string& from = "") {
  const std::string dir = fs::path(tls_dir).parent_path() / name;
  fs::create_directory(dir);
  for (const auto& entry : fs::directory_iterator(tls_dir)) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
  }
  fs::remove(dir + "/" + file);
  if (!from.empty()) {
    fs::copy_file(from, dir + "/" + file);
  } else if (!text.empty()) {
    EXPECT_TRUE(WriteFileAtomic(dir + "/" + file, text).ok());
  }
  return dir;
}

TEST_F(TlsTest, AServiceGivenABadOrMissingCertificateExits2NamingTheFile) {
  const std::string job = dir_ + "/job.yaml";
  const std::string token = absl::StrCat(kRunTokenEnv, "=", CurrentRpcAuth().token);
  const std::vector<std::string> ps = {Bin("strata-ps"),
                                       "--config",
                                       job,
                                       "--partition",
                                       "0",
                                       "--partitions",
                                       "1",
                                       "--workers",
                                       "1",
                                       "--train-examples",
                                       "256",
                                       "--sample-budget",
                                       "0",
                                       "--listen",
                                       "127.0.0.1:0"};
  const std::string expired = dir_ + "/expired";
  RunCertificateOptions old;
  old.backdate = std::chrono::hours(48);
  old.valid_for = -std::chrono::hours(24);
  ASSERT_TRUE(WriteRunCertificates(expired, old).ok());
  struct Case {
    const char* label;
    std::vector<std::string> flags;
    std::vector<std::string> expected;  // each must be in the output
  };
  const std::vector<Case> cases = {
      {"no directory", {"--tls", "mutual"}, {"--tls mutual needs --tls-dir"}},
      {"a directory with TLS off",
       {"--tls-dir", tls_dir_},
       {"--tls-dir is given but --tls is off"}},
      {"an unknown mode",
       {"--tls", "strict", "--tls-dir", tls_dir_},
       {"unknown TLS mode 'strict'"}},
      {"a directory that is not there",
       {"--tls", "mutual", "--tls-dir", dir_ + "/nowhere"},
       {dir_ + "/nowhere/ca.pem"}},
      {"a server certificate that is not PEM",
       {"--tls", "mutual", "--tls-dir", Variant(tls_dir_, "garbage", "server.pem", "hello\n")},
       {dir_ + "/garbage/server.pem", "no PEM certificate"}},
      {"the key of another certificate",
       {"--tls", "mutual", "--tls-dir",
        Variant(tls_dir_, "swapped", "server.key", "", other_dir_ + "/server.key")},
       {dir_ + "/swapped/server.key", "does not belong to the certificate"}},
      {"a server certificate of another CA",
       {"--tls", "on", "--tls-dir",
        Variant(Variant(tls_dir_, "foreign1", "server.pem", "", other_dir_ + "/server.pem"),
                "foreign2", "server.key", "", other_dir_ + "/server.key")},
       {dir_ + "/foreign2/server.pem", "not accepted with the CA"}},
      {"no client certificate under mutual",
       {"--tls", "mutual", "--tls-dir", Variant(tls_dir_, "noclient", "client.pem", "")},
       {dir_ + "/noclient/client.pem"}},
      {"the client certificate as the server's",
       {"--tls", "on", "--tls-dir",
        Variant(Variant(tls_dir_, "roles1", "server.pem", "", tls_dir_ + "/client.pem"), "roles2",
                "server.key", "", tls_dir_ + "/client.key")},
       {dir_ + "/roles2/server.pem",
        "its extended key usage does not allow TLS server authentication"}},
      {"another server name",
       {"--tls", "on", "--tls-dir", tls_dir_, "--tls-server-name", "trainer.example"},
       {dir_ + "/tls/server.pem", "does not name the server name 'trainer.example'"}},
      {"an expired certificate",
       {"--tls", "on", "--tls-dir", expired},
       {expired + "/server.pem", "certificate has expired"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = ps;
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const Exit exit = RunWithoutToken(argv, dir_ + "/bad.log", {token});
    EXPECT_EQ(exit.code, 2) << c.label << ": " << exit.output;
    for (const std::string& e : c.expected) {
      EXPECT_TRUE(absl::StrContains(exit.output, e)) << c.label << ": " << exit.output;
    }
  }
  // Every service binary refuses the same way (the worker and evaluator before loading LibTorch's
  // models, the sharder's server before serving).
  const std::vector<std::vector<std::string>> others = {
      {Bin("strata-worker"), "--config", job, "--rank", "0", "--world", "1", "--listen",
       "127.0.0.1:0"},
      {Bin("strata-evaluator"), "--config", job, "--listen", "127.0.0.1:0"},
      {Bin("strata-sharder"), "serve", "--listen", "127.0.0.1:0"},
  };
  for (std::vector<std::string> argv : others) {
    argv.insert(argv.end(), {"--tls", "mutual", "--tls-dir", dir_ + "/nowhere"});
    const Exit exit = RunWithoutToken(argv, dir_ + "/bad.log", {token});
    EXPECT_EQ(exit.code, 2) << argv[0] << ": " << exit.output;
    EXPECT_TRUE(absl::StrContains(exit.output, dir_ + "/nowhere/ca.pem"))
        << argv[0] << ": " << exit.output;
  }
}

// The launched services' command lines, from events.jsonl (not the sharder's: it serves nothing).
std::vector<std::string> LaunchCommands(const std::string& run_dir) {
  std::vector<std::string> commands;
  for (const auto& e : testing::ReadLines(run_dir + "/events.jsonl")) {
    if (e["event"] == "launched" && e.value("process", "") != "sharder") {
      commands.push_back(e.value("command", ""));
    }
  }
  return commands;
}

// Whether any file under `dir` holds a private key.
bool HoldsAPrivateKey(const std::string& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    if (absl::StrContains(ReadFile(entry.path().string()).value_or(""), "PRIVATE KEY")) {
      return true;
    }
  }
  return false;
}

// A whole `strata run` with TLS on, watched from outside (wire_watch.h): every TCP segment on
// loopback from before the run starts to after it ends, the listening TCP ports of every process of
// the run (sampled every 100 ms from /proc), and the server's own counters read as an observer
// while the run is held open (its evaluator stopped, see run_observer.h). It asserts
//  - every TCP port a process of the run listens on completes a TLS handshake with the run's CA
//    (the test dials each as a gRPC client with the run's certificates): no plain TCP ring link,
//    no push/pull data plane; the orchestrator listens on none;
//  - every connection to a port of the run starts with a TLS handshake record in both directions,
//    and such connections carry megabytes into the server and into each worker (the push/pull and
//    the ring);
//  - the server moved no tensor through shared memory (shared_memory_exchanges 0) and took pushes.
// The ring runs over TCP here (launcher.ring_transport: tcp) so that its bytes cross loopback too.
// Seen to fail: with the `ChannelsUseTls()` conditions taken out of ps_main.cc (the data plane) and
// worker.cc (tcp_data_plane), ps-0's second port refused the handshake, the workers' connections
// to it began with plaintext frames, and shared_memory_exchanges counted every exchange.
struct WatchedRun {
  int exit_code = -1;
  std::string output;
};

uint16_t PortOf(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// Whether a TLS gRPC client with this process's (the observer's) certificates gets through the
// handshake on the port.
bool CompletesTlsHandshake(uint16_t port) {
  return MakeChannel(absl::StrCat("127.0.0.1:", port))
      ->WaitForConnected(DeadlineAfter(std::chrono::seconds(20)));
}

// The ports of the run's /metrics endpoints (ports/<process>.metrics.port). They speak plain HTTP
// by design (docs/security.md, "Metrics endpoints"): instead of a TLS handshake they must answer
// GET /metrics with an exposition, and no tensor is ever sent to them. (Before the test knew them,
// a TLS run with metrics on failed it: the sampler's handshake with ps-0's metrics port hung for
// its 20 s deadline and the port was listed as refusing TLS.)
std::set<uint16_t> MetricsPortsOf(const std::string& run_dir) {
  std::set<uint16_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/ports", ec)) {
    if (!absl::EndsWith(entry.path().filename().string(), ".metrics.port")) continue;
    uint32_t port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::Slurp(entry.path().string())), &port) &&
        port > 0 && port < 65536) {
      out.insert(static_cast<uint16_t>(port));
    }
  }
  return out;
}

bool ServesMetrics(uint16_t port) {
  const testing::HttpResponse r = testing::HttpGetOnLoopback(port, "/metrics");
  return r.status == 200 && absl::StrContains(r.body, "# TYPE strata_");
}

WatchedRun RunWatched(const std::string& job_path, const std::string& run_dir, TlsMode mode,
                      const std::string& tls_dir, const std::string& server_name) {
  WatchedRun result;
  auto capture = testing::LoopbackCapture::Start();
  if (!capture.ok()) {
    ADD_FAILURE() << capture.status();  // the caller checked Capturable() first
    return result;
  }
  testing::BackgroundRun run({"run", job_path, "--quiet", "--out", run_dir}, run_dir + ".out");
  EXPECT_TRUE(testing::AwaitEvent(run_dir, run, "training_started").is_object()) << run.Output();
  std::vector<testing::RunProcess> processes;
  EXPECT_TRUE(testing::Eventually(
      [&] {
        processes = testing::RunProcesses(run_dir);
        return processes.size() == 4u;
      },
      seconds(60)));
  const absl::Status joined = testing::JoinRunAsObserver(run_dir, mode, tls_dir, server_name);
  EXPECT_TRUE(joined.ok()) << joined;
  // The listening ports of every process of the run, sampled until it ends; each new one is dialled
  // with TLS as it appears (the first round before the evaluator is held).
  std::map<std::string, std::set<uint16_t>> listening;
  std::vector<std::string> refused;  // "name:port" that did not complete a handshake
  std::set<uint16_t> metrics_ports;   // the plain-HTTP /metrics endpoints among them
  std::mutex mu;
  std::atomic<bool> sampling{true}, first_round{false};
  std::thread sampler([&] {
    std::set<uint16_t> probed;
    while (sampling) {
      std::vector<std::pair<std::string, int>> pids = {{"orchestrator", run.pid()}};
      for (const auto& p : testing::RunProcesses(run_dir)) pids.push_back({p.name, p.pid});
      for (const auto& [name, pid] : pids) {
        for (uint16_t port : testing::ListeningTcpPorts(testing::SocketInodesOf(pid))) {
          {
            std::lock_guard<std::mutex> lock(mu);
            listening[name].insert(port);
          }
          if (!probed.insert(port).second) continue;
          // A metrics endpoint listens a moment before its port file is written: a port that
          // fails the handshake is looked up again before it counts as refused.
          bool metrics = MetricsPortsOf(run_dir).count(port) > 0;
          const bool tls = !metrics && CompletesTlsHandshake(port);
          if (!tls && !metrics) metrics = MetricsPortsOf(run_dir).count(port) > 0;
          std::lock_guard<std::mutex> lock(mu);
          if (metrics) {
            metrics_ports.insert(port);
            if (!ServesMetrics(port)) refused.push_back(absl::StrCat(name, ":", port, " (metrics)"));
          } else if (!tls) {
            refused.push_back(absl::StrCat(name, ":", port));
          }
        }
      }
      first_round = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // sampling, not waiting
    }
  });
  EXPECT_TRUE(testing::Eventually([&] { return first_round.load(); }, seconds(120)));
  std::optional<testing::RunProcess> evaluator = testing::RunProcessNamed(run_dir, "evaluator");
  EXPECT_TRUE(evaluator.has_value());
  auto held = std::make_unique<testing::HeldProcess>(evaluator ? evaluator->pid : 0);
  EXPECT_TRUE(testing::AwaitEvent(run_dir, run, "switch_done").is_object()) << run.Output();
  const std::optional<testing::RunProcess> ps = testing::RunProcessNamed(run_dir, "ps-0");
  v1::ServerStatus status;
  EXPECT_TRUE(ps.has_value() && testing::Eventually(
                                    [&] {
                                      auto s = testing::ServerStatusOf(ps->address);
                                      if (s.ok()) status = *s;
                                      return s.ok() && s->pushes() > 0;
                                    },
                                    seconds(120)))
      << status.DebugString();
  EXPECT_EQ(status.shared_memory_exchanges(), 0) << status.DebugString();
  held.reset();
  result.exit_code = run.Wait(seconds(600));
  result.output = run.Output();
  sampling = false;
  sampler.join();
  const std::vector<testing::WatchedConnection> connections = (*capture)->Stop();
  EXPECT_EQ((*capture)->drops(), 0u) << "the capture fell behind: first segments may be lost";

  EXPECT_TRUE(refused.empty()) << "ports of the run that refused a TLS handshake: "
                               << ::testing::PrintToString(refused);
  std::set<uint16_t> run_ports;
  for (const testing::RunProcess& p : processes) {
    EXPECT_TRUE(listening[p.name].count(PortOf(p.address)))
        << p.name << ": its gRPC port was never seen listening";
    run_ports.insert(listening[p.name].begin(), listening[p.name].end());
  }
  for (uint16_t port : listening["orchestrator"]) {
    EXPECT_TRUE(metrics_ports.count(port)) << "the orchestrator listened on TCP port " << port;
  }
  // Every process has its metrics endpoint (on by default); its plain HTTP is the one exception.
  EXPECT_EQ(metrics_ports.size(), processes.size() + listening["orchestrator"].size());
  for (uint16_t port : metrics_ports) run_ports.erase(port);
  std::map<uint16_t, uint64_t> inbound;  // bytes clients sent to each port of the run
  int checked = 0;
  for (const testing::WatchedConnection& c : connections) {
    if (!run_ports.count(c.server_port) || c.client_bytes == 0) continue;
    ++checked;
    inbound[c.server_port] += c.client_bytes;
    EXPECT_TRUE(c.client_first_seen &&
                testing::WatchedConnection::StartsWithTlsHandshake(c.client_first))
        << "not a TLS handshake from the client: " << c.Describe();
    if (c.server_bytes > 0) {
      EXPECT_TRUE(c.server_first_seen &&
                  testing::WatchedConnection::StartsWithTlsHandshake(c.server_first))
          << "not a TLS handshake from the server: " << c.Describe();
    }
  }
  EXPECT_GT(checked, 0);
  for (const testing::RunProcess& p : processes) {
    if (p.name == "evaluator") continue;
    // The tensors: push/pull into the server, the ring into each worker.
    EXPECT_GT(inbound[PortOf(p.address)], 1u << 20)
        << p.name << " took " << inbound[PortOf(p.address)] << " bytes";
  }
  return result;
}

bool Capturable(std::string* why) {
  auto capture = testing::LoopbackCapture::Start();
  if (capture.ok()) return true;
  *why = std::string(capture.status().message());
  return false;
}

TEST_F(TlsTest, AJobTrainsEndToEndWithMutualTlsOnCertificatesTheRunMakes) {
  if (std::string why; !Capturable(&why)) STRATA_UNAVAILABLE(why);
  const std::string run_dir = dir_ + "/run";
  testing::WriteText(dir_ + "/run.yaml", std::string("name: tls-mutual\n") + kRunJob +
                                             "launcher: { ring_transport: tcp }\n"
                                             "security: { tls: mutual }\n");
  const WatchedRun r =
      RunWatched(dir_ + "/run.yaml", run_dir, TlsMode::kMutual, "", kDefaultTlsServerName);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json summary = testing::ReadJson(run_dir + "/summary.json");
  EXPECT_EQ(summary["state"], "succeeded") << summary.dump(2);
  EXPECT_TRUE(summary["switch_epoch"].is_number()) << summary.dump(2);  // the handover happened
  const std::vector<std::string> commands = LaunchCommands(run_dir);
  EXPECT_GE(commands.size(), 4u);
  for (const std::string& c : commands) {
    EXPECT_TRUE(absl::StrContains(c, "--tls mutual --tls-dir ")) << c;
    EXPECT_TRUE(absl::StrContains(c, run_dir + "/tls")) << c;
  }
  // The run's keys are gone with it, and nothing else it wrote holds one.
  EXPECT_FALSE(testing::Exists(run_dir + "/tls"));
  EXPECT_FALSE(HoldsAPrivateKey(run_dir));
}

TEST_F(TlsTest, AJobTrainsEndToEndWithTlsOnAndTheUsersCertificates) {
  if (std::string why; !Capturable(&why)) STRATA_UNAVAILABLE(why);
  const std::string users = dir_ + "/users-tls";
  RunCertificateOptions options;
  options.server_name = "trainer.example";
  ASSERT_TRUE(WriteRunCertificates(users, options).ok());
  const std::string run_dir = dir_ + "/run";
  testing::WriteText(dir_ + "/run.yaml", std::string("name: tls-on\n") + kRunJob +
                                             "launcher: { ring_transport: tcp }\n"
                                             "security: { tls: on, tls_dir: " +
                                             users + ", tls_server_name: trainer.example }\n");
  const WatchedRun r =
      RunWatched(dir_ + "/run.yaml", run_dir, TlsMode::kOn, users, "trainer.example");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::ReadJson(run_dir + "/summary.json")["state"], "succeeded");
  for (const std::string& c : LaunchCommands(run_dir)) {
    EXPECT_TRUE(absl::StrContains(
        c, absl::StrCat("--tls on --tls-dir ", users, " --tls-server-name trainer.example")))
        << c;
  }
  EXPECT_TRUE(testing::Exists(users + "/server.key")) << "the user's certificates were removed";
  EXPECT_FALSE(testing::Exists(run_dir + "/tls"));
}

TEST_F(TlsTest, ValidationRefusesCertificatesThatWouldFailAndKubernetesMakesItsOwn) {
  const std::string garbage = Variant(tls_dir_, "garbage", "client.key", "not a key\n");
  testing::WriteText(dir_ + "/bad.yaml", std::string("name: tls-bad\n") + kRunJob +
                                             "security:\n  tls: mutual\n  tls_dir: " + garbage +
                                             "\n");
  for (const std::string& command :
       {Strata() + " validate " + dir_ + "/bad.yaml",
        Strata() + " run " + dir_ + "/bad.yaml --quiet --out " + dir_ + "/never"}) {
    const CommandResult r = RunCommand(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, dir_ + "/bad.yaml:9: security.tls_dir: " + garbage +
                                                "/client.key: holds no PEM private key"))
        << command << "\n"
        << r.output;
  }
  EXPECT_FALSE(testing::Exists(dir_ + "/never"));

  // Compose and Kubernetes carry TLS: the one-shot step makes the run's certificates in the run
  // volume (compose may bind the user's directory read-only instead; a directory of this machine
  // does not reach Kubernetes' pods, so there it is refused, naming the key).
  testing::WriteText(dir_ + "/compose.yaml", std::string("name: tls-compose\n") + kRunJob +
                                                 "launcher: { kind: compose }\n"
                                                 "security: { tls: on }\n");
  const CommandResult v = RunCommand(Strata() + " validate " + dir_ + "/compose.yaml");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  const CommandResult k = RunCommand(Strata() + " validate " + dir_ + "/compose.yaml" +
                                     " --set launcher.kind=kubernetes");
  EXPECT_EQ(k.exit_code, 0) << k.output;
  const CommandResult own = RunCommand(Strata() + " validate " + dir_ + "/compose.yaml" +
                                       " --set launcher.kind=kubernetes --set security.tls_dir=" +
                                       tls_dir_);
  EXPECT_EQ(own.exit_code, 2) << own.output;
  EXPECT_TRUE(absl::StrContains(own.output, "security.tls_dir: a directory of this machine does "
                                            "not reach the pods"))
      << own.output;
  testing::WriteText(dir_ + "/run.yaml", std::string("name: tls-render\n") + kRunJob);
  const CommandResult kubernetes =
      RunCommand(Strata() + " render " + dir_ + "/run.yaml --launcher kubernetes --out " + dir_ +
                 "/rendered-k8s --set security.tls=mutual");
  ASSERT_EQ(kubernetes.exit_code, 0) << kubernetes.output;
  // Every service's pod serves TLS only and is probed by a TLS client of the run's CA (the
  // kubelet's gRPC probe speaks no TLS); the one-shot step makes the certificates first.
  const std::string base = dir_ + "/rendered-k8s/base/";
  for (const std::string file : {"parameter-servers.yaml", "workers.yaml", "evaluator.yaml"}) {
    const std::string text = testing::Slurp(base + file);
    EXPECT_TRUE(absl::StrContains(text, "--tls mutual")) << file << "\n" << text;
    EXPECT_TRUE(absl::StrContains(text, "exec:")) << file;
    EXPECT_TRUE(absl::StrContains(text, "command: [strata-health, \"127.0.0.1:50051\", "
                                        "--deadline-s, \"8\", --tls, mutual, --tls-dir, "
                                        "/run/strata/tls, --tls-server-name, strata]"))
        << file << "\n" << text;
    EXPECT_FALSE(absl::StrContains(text, "grpc:\n")) << file;
  }
  const std::string orchestrator = testing::Slurp(base + "orchestrator.yaml");
  EXPECT_TRUE(absl::StrContains(orchestrator, "strata certificates")) << orchestrator;
  // `strata supervise` reads TLS from the job spec every pod mounts, with the run's directory.
  const std::string spec = testing::Slurp(base + "job.yaml");
  EXPECT_TRUE(absl::StrContains(spec, "  tls: mutual\n  tls_dir: /run/strata/tls\n")) << spec;
  // ... which its checks accept: only another directory is a user's. (As first written, the
  // refusal of a user's directory refused this one too, and supervise would have exited 2 in
  // its pod. Here the certificates themselves are missing, which is all it may say.)
  const CommandResult supervised = RunCommand(Strata() + " validate " + base + "job.yaml");
  EXPECT_FALSE(absl::StrContains(supervised.output, "does not reach the pods"))
      << supervised.output;
  EXPECT_TRUE(absl::StrContains(supervised.output, "/run/strata/tls")) << supervised.output;
  // The user's directory is checked on the machine that renders, before anything is written.
  const CommandResult bad = RunCommand(Strata() + " render " + dir_ +
                                       "/run.yaml --launcher compose --out " + dir_ +
                                       "/rendered --set security.tls=mutual --set "
                                       "security.tls_dir=" + garbage);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(absl::StrContains(bad.output, "security.tls_dir: " + garbage +
                                                "/client.key: holds no PEM private key"))
      << bad.output;
  EXPECT_FALSE(testing::Exists(dir_ + "/rendered"));
}

}  // namespace
}  // namespace strata
