// The run token against the real service binaries (docs/security.md, "Authentication"): every
// method of every service in proto/strata/v1, enumerated from the generated descriptors, answers a
// call without the token, or with a wrong one, with UNAUTHENTICATED, and no handler runs (the
// services are still up after Stop was called on each of them); a service started without a token
// refuses to start unless told --insecure-no-auth; `strata run` gives its services a fresh token
// in their environment only, and nothing it writes holds it.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/process/child_process.h"
#include "services/common/stream/embedded_broker.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "tests/integration/security/security_test_util.h"
#include "tests/support/ci.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr char kJob[] = R"(name: auth-test
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 256, max_test: 100 }
model: { arch: mlp }
training: { epochs: 1, batch_size: 64 }
cluster: { workers: 1, parameter_servers: 1, threads_per_worker: 1 }
)";

constexpr char kStreamJob[] = R"(name: auth-test-stream
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 256, max_test: 100 }
model: { arch: mlp }
training: { momentum: 0, threads: 1 }
cluster: { workers: 1 }
strategy: { kind: stream }
stream: { max_seconds: 3600 }
)";

// Which binary serves each service. A service declared in the protos and missing here fails the
// test: say which binary serves it (and start that binary below) so that its methods are checked.
const std::map<std::string, std::string>& ServingBinary() {
  static const auto* m = new std::map<std::string, std::string>{
      {"strata.v1.ParameterServer", "strata-ps"},
      {"strata.v1.Worker", "strata-worker"},
      {"strata.v1.PullCoordinator", "strata-ps"},
      {"strata.v1.Collective", "strata-worker"},  // the ring, served on the worker's port
      {"strata.v1.Evaluator", "strata-evaluator"},
      {"strata.v1.Sharder", "strata-sharder"},
      // A stream job's replica: strata-worker with strategy.kind stream, on a broker of the test's.
      {"strata.v1.StreamReplica", "strata-worker (stream)"},
  };
  return *m;
}

// Services that take no run token by design, each with where its access is checked instead.
const std::map<std::string, std::string>& TokenFreeServices() {
  static const auto* m = new std::map<std::string, std::string>{
      // A Unix socket in a 0700 directory of the orchestrator's (ControlSocket tests).
      {"strata.v1.RunControl", "the orchestrator's control socket"},
  };
  return *m;
}

// Every service of every proto file, from the generated descriptor pool.
std::vector<const google::protobuf::ServiceDescriptor*> AllServices() {
  std::vector<const google::protobuf::ServiceDescriptor*> services;
  for (absl::string_view file : absl::StrSplit(STRATA_PROTO_FILES, ',')) {
    const google::protobuf::FileDescriptor* fd =
        google::protobuf::DescriptorPool::generated_pool()->FindFileByName(std::string(file));
    EXPECT_NE(fd, nullptr) << file << " is not in the generated descriptor pool";
    if (fd == nullptr) continue;
    for (int s = 0; s < fd->service_count(); ++s) services.push_back(fd->service(s));
  }
  return services;
}

std::shared_ptr<grpc::Channel> ChannelWithoutToken(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/strata-auth-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/job.yaml", kJob).ok());
  }
  void TearDown() override {
    std::vector<ChildProcess*> all;
    for (auto& [name, s] : services_) all.push_back(s.process.get());
    TerminateAll(all, seconds(5));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  struct Service {
    std::unique_ptr<ChildProcess> process;
    std::string address;
  };

  // Starts `binary` on 127.0.0.1:0 through ChildProcess (which hands it this process's token),
  // as `name` (default: the binary's).
  void Launch(const std::string& binary, std::vector<std::string> args, std::string name = "") {
    if (name.empty()) name = binary;
    SpawnOptions o;
    o.name = name;
    o.log_path = dir_ + "/" + name + ".log";
    const std::string port_file = dir_ + "/" + name + ".port";
    o.argv = {Bin(binary)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file});
    auto child = ChildProcess::Spawn(o);
    ASSERT_TRUE(child.ok()) << child.status();
    Service& s = services_[name];
    s.process = std::move(*child);
    auto port = WaitForPortFile(*s.process, port_file, seconds(120));
    ASSERT_TRUE(port.ok()) << port.status();
    s.address = absl::StrCat("127.0.0.1:", *port);
  }

  void LaunchAll() {
    const std::string job = dir_ + "/job.yaml";
    ASSERT_NO_FATAL_FAILURE(
        // PDP: partition 0 also serves the PullCoordinator.
        Launch("strata-ps",
               {"--config", job, "--partition", "0", "--partitions", "1", "--workers", "1",
                "--train-examples", "256", "--sample-budget", "0", "--consistency", "pdp"}));
    ASSERT_NO_FATAL_FAILURE(Launch(
        "strata-worker", {"--config", job, "--rank", "0", "--world", "1", "--run-dir", dir_}));
    ASSERT_NO_FATAL_FAILURE(Launch("strata-evaluator", {"--config", job}));
    // The subcommand comes first; Launch appends --listen and --port-file after it.
    ASSERT_NO_FATAL_FAILURE(Launch("strata-sharder", {"serve", "--run-dir", dir_}));
    // A replica of a stream job that trains on nothing (no producer) for an hour: it serves
    // StreamReplica once it has found its (single) replica set on the broker.
    if (auto found = FindRedisServer(); !found.ok()) {
      STRATA_UNAVAILABLE(std::string(found.status().message()));
    }
    EmbeddedBrokerOptions broker;
    broker.directory = dir_ + "/broker";
    ASSERT_TRUE(MakeDirs(broker.directory).ok());
    auto started = EmbeddedBroker::Start(broker);
    ASSERT_TRUE(started.ok()) << started.status();
    broker_ = *std::move(started);
    const std::string stream_job = dir_ + "/stream.yaml";
    ASSERT_TRUE(WriteFileAtomic(stream_job, kStreamJob).ok());
    ASSERT_NO_FATAL_FAILURE(Launch("strata-worker",
                                   {"--config", stream_job, "--rank", "0", "--run-dir",
                                    dir_ + "/stream-run", "--stream-address",
                                    broker_->socket_path()},
                                   "strata-worker (stream)"));
  }

  std::string dir_;
  std::unique_ptr<EmbeddedBroker> broker_;    // the stream replica's
  std::map<std::string, Service> services_;  // by the name Launch gave
};

TEST_F(AuthTest, EveryMethodOfEveryServiceRefusesCallsWithoutTheRightToken) {
  ASSERT_NO_FATAL_FAILURE(LaunchAll());
  const std::string token = CurrentRpcAuth().token;
  ASSERT_GE(token.size(), kMinRunTokenChars);
  auto other = GenerateRunToken();
  ASSERT_TRUE(other.ok());
  // "" sends no authorization header at all.
  const std::vector<std::string> wrong = {
      "",
      "Bearer " + *other,
      "Bearer " + token.substr(0, token.size() - 1),
      "Bearer " + token + "0",
      token,  // without the scheme
      "Bearer ",
  };
  int methods = 0;
  for (const google::protobuf::ServiceDescriptor* service : AllServices()) {
    if (TokenFreeServices().count(service->full_name()) > 0) continue;
    auto binary = ServingBinary().find(service->full_name());
    ASSERT_NE(binary, ServingBinary().end())
        << service->full_name() << " is served by no binary this test starts";
    const std::string address = services_.at(binary->second).address;
    for (int m = 0; m < service->method_count(); ++m) {
      const google::protobuf::MethodDescriptor* method = service->method(m);
      const std::string path = absl::StrCat("/", service->full_name(), "/", method->name());
      ++methods;
      for (const std::string& authorization : wrong) {
        const grpc::Status status =
            CallWithDefaultRequest(ChannelWithoutToken(address), path, authorization);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << path << " with authorization '" << authorization << "': " << status.error_code()
            << " " << status.error_message();
      }
    }
  }
  EXPECT_GE(methods, 20) << "fewer methods than the protos declared when this test was written";

  // No handler ran: Stop was called on every service and each is still up and answering a caller
  // who has the token (MakeChannel carries it).
  for (auto& [binary, s] : services_) {
    EXPECT_FALSE(s.process->Poll()) << binary << " " << s.process->ExitDescription()
                                    << "; its log ends: " << LogTail(s.process->log_path());
  }
  for (const char* path : {"/strata.v1.ParameterServer/GetStatus", "/strata.v1.Worker/GetStatus",
                           "/strata.v1.Evaluator/GetStatus"}) {
    const std::string service = std::string(path).substr(1, std::string(path).rfind('/') - 1);
    const std::string address = services_.at(ServingBinary().at(service)).address;
    const grpc::Status status = CallWithDefaultRequest(MakeChannel(address), path, "");
    EXPECT_TRUE(status.ok()) << path << ": " << status.error_code() << " "
                             << status.error_message();
  }
  // The token is in no service's log.
  for (auto& [binary, s] : services_) {
    auto log = ReadFile(s.process->log_path());
    ASSERT_TRUE(log.ok());
    EXPECT_FALSE(absl::StrContains(*log, token)) << binary << " logged the run token";
  }
}

TEST_F(AuthTest, ServicesRefuseToStartWithoutAToken) {
  const std::string job = dir_ + "/job.yaml";
  const std::vector<std::vector<std::string>> commands = {
      {Bin("strata-ps"), "--config", job, "--partition", "0", "--partitions", "1", "--workers", "1",
       "--train-examples", "256", "--sample-budget", "0", "--listen", "127.0.0.1:0"},
      {Bin("strata-worker"), "--config", job, "--rank", "0", "--world", "1", "--listen",
       "127.0.0.1:0"},
      {Bin("strata-evaluator"), "--config", job, "--listen", "127.0.0.1:0"},
      {Bin("strata-sharder"), "serve", "--listen", "127.0.0.1:0"},
  };
  for (const auto& command : commands) {
    const std::string name = fs::path(command[0]).filename();
    const Exit none = RunWithoutToken(command, dir_ + "/" + name + ".none.log");
    EXPECT_EQ(none.code, 2) << name << ": " << none.output;
    EXPECT_TRUE(absl::StrContains(none.output, kRunTokenEnv)) << name << ": " << none.output;
    EXPECT_TRUE(absl::StrContains(none.output, kInsecureNoAuthFlag)) << name << ": " << none.output;
  }
  // A token too short to be a secret is refused too.
  const Exit short_token =
      RunWithoutToken(commands[0], dir_ + "/short.log", {absl::StrCat(kRunTokenEnv, "=abc")});
  EXPECT_EQ(short_token.code, 2) << short_token.output;
  EXPECT_TRUE(absl::StrContains(short_token.output, "at least")) << short_token.output;
}

TEST_F(AuthTest, InsecureNoAuthServesAnyCallerAndSaysSo) {
  const std::string port_file = dir_ + "/ps.port", log = dir_ + "/ps.log";
  std::unique_ptr<Exit> exit;
  std::thread runner([&] {
    exit = std::make_unique<Exit>(RunWithoutToken(
        {Bin("strata-ps"), "--config", dir_ + "/job.yaml", "--partition", "0", "--partitions", "1",
         "--workers", "1", "--train-examples", "256", "--sample-budget", "0", "--listen",
         "127.0.0.1:0", "--port-file", port_file, kInsecureNoAuthFlag},
        log));
  });
  std::optional<int> port;
  const auto until = std::chrono::steady_clock::now() + seconds(60);
  while (!(port = ReadPortFile(port_file)) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the file appears when it does
  }
  ASSERT_TRUE(port.has_value()) << ReadFile(log).value_or("(no log)");
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  const grpc::Status status = CallWithDefaultRequest(ChannelWithoutToken(address),
                                                     "/strata.v1.ParameterServer/GetStatus", "");
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  const grpc::Status stop =
      CallWithDefaultRequest(ChannelWithoutToken(address), "/strata.v1.ParameterServer/Stop", "");
  EXPECT_TRUE(stop.ok()) << stop.error_code() << " " << stop.error_message();
  runner.join();
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->code, 0) << exit->output;
  EXPECT_TRUE(absl::StrContains(exit->output, "warning")) << exit->output;
  EXPECT_TRUE(absl::StrContains(exit->output, kInsecureNoAuthFlag)) << exit->output;
}

// The manual Kubernetes path (docs/deploy.md) makes the token with `openssl rand -hex 32 >
// base/run-token`, and the Secret hands the file to STRATA_RUN_TOKEN as it is, newline included.
// Before: every service refused to start with it ("may hold only visible ASCII characters", exit
// code 2), which is how this test failed against the old check. Exactly one trailing newline is
// now stripped; the token without it is what callers present.
TEST_F(AuthTest, ATokenFileMadeAsDocumentedIsAccepted) {
  const std::string token_file = dir_ + "/run-token";
  const Exit made =
      RunWithoutToken({"/bin/sh", "-c", absl::StrCat("openssl rand -hex 32 > ", token_file)},
                      dir_ + "/openssl.log");
  ASSERT_EQ(made.code, 0) << "openssl rand failed: " << made.output;
  const std::string as_written = ReadFile(token_file).value_or("");
  ASSERT_EQ(as_written.size(), 65u) << "expected 64 hex characters and a newline";
  ASSERT_EQ(as_written.back(), '\n');
  const std::string token = as_written.substr(0, 64);

  const std::string port_file = dir_ + "/ps.port", log = dir_ + "/ps.log";
  std::unique_ptr<Exit> exit;
  std::atomic<bool> ended{false};
  std::thread runner([&] {
    exit = std::make_unique<Exit>(
        RunWithoutToken({Bin("strata-ps"), "--config", dir_ + "/job.yaml", "--partition", "0",
                         "--partitions", "1", "--workers", "1", "--train-examples", "256",
                         "--listen", "127.0.0.1:0", "--port-file", port_file},
                        log, {absl::StrCat(kRunTokenEnv, "=", as_written)}));
    ended = true;
  });
  std::optional<int> port;
  const auto until = std::chrono::steady_clock::now() + seconds(60);
  while (!(port = ReadPortFile(port_file)) && std::chrono::steady_clock::now() < until && !ended) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the file appears when it does
  }
  if (!port.has_value()) {
    runner.join();
    FAIL() << "strata-ps did not start with the documented token file: "
           << ReadFile(log).value_or("(no log)");
  }
  auto channel = ChannelWithoutToken(absl::StrCat("127.0.0.1:", *port));
  const grpc::Status status = CallWithDefaultRequest(
      channel, "/strata.v1.ParameterServer/GetStatus", absl::StrCat("Bearer ", token));
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  const grpc::Status stop = CallWithDefaultRequest(channel, "/strata.v1.ParameterServer/Stop",
                                                   absl::StrCat("Bearer ", token));
  EXPECT_TRUE(stop.ok()) << stop.error_code() << " " << stop.error_message();
  runner.join();
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->code, 0) << exit->output;

  // Exactly one: two newlines (or a newline inside) are still refused.
  const Exit two = RunWithoutToken(
      {Bin("strata-ps"), "--config", dir_ + "/job.yaml", "--partition", "0", "--partitions", "1",
       "--workers", "1", "--train-examples", "256", "--listen", "127.0.0.1:0"},
      dir_ + "/two.log", {absl::StrCat(kRunTokenEnv, "=", token, "\n\n")});
  EXPECT_EQ(two.code, 2) << two.output;
}

// The environment of process `pid` as NAME=value strings ("" if unreadable).
std::vector<std::string> EnvironmentOf(int pid) {
  auto text = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  if (!text.ok()) return {};
  return absl::StrSplit(*text, '\0', absl::SkipEmpty());
}

TEST_F(AuthTest, StrataRunHandsEveryServiceAFreshTokenThroughItsEnvironmentOnly) {
  std::ofstream(dir_ + "/run.yaml") << R"(name: auth-run
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 200 }
model: { arch: mlp }
training: { epochs: 400, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
strategy: { kind: ps, consistency: asp }
)";
  const std::string run_dir = dir_ + "/run";
  // `strata` inherits this test's token (ChildProcess) and must not pass it on.
  SpawnOptions o;
  o.name = "strata";
  o.argv = {Bin("strata"), "run", dir_ + "/run.yaml", "--out", run_dir, "--quiet"};
  o.log_path = dir_ + "/strata.log";
  auto strata = ChildProcess::Spawn(o);
  ASSERT_TRUE(strata.ok()) << strata.status();
  std::unique_ptr<ChildProcess> run = std::move(*strata);

  // Wait until the services train (so every call between them authenticated), then look at them.
  std::vector<int> pids;
  const auto until = std::chrono::steady_clock::now() + seconds(180);
  while (std::chrono::steady_clock::now() < until && !run->Poll()) {
    pids.clear();
    auto text = ReadFile(run_dir + "/status.json");
    nlohmann::json status =
        text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    bool trained =
        status.is_object() && status.contains("workers") && status["workers"].size() == 2;
    if (trained) {
      for (const auto& w : status["workers"]) trained = trained && w.value("step", 0) > 5;
      for (const auto& p : status["processes"]) {
        if (p.value("running", false)) pids.push_back(p.value("pid", 0));
      }
    }
    if (trained && pids.size() == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status.json is rewritten
  }
  ASSERT_EQ(pids.size(), 4u) << LogTail(o.log_path);
  std::string token;
  for (int pid : pids) {
    std::string found;
    for (const std::string& e : EnvironmentOf(pid)) {
      if (absl::StartsWith(e, absl::StrCat(kRunTokenEnv, "="))) {
        found = e.substr(strlen(kRunTokenEnv) + 1);
      }
    }
    EXPECT_EQ(found.size(), 64u) << "pid " << pid;
    if (token.empty()) token = found;
    EXPECT_EQ(found, token) << "pid " << pid << " has another run's token";
    auto cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    EXPECT_TRUE(cmdline.ok() && !token.empty() && !absl::StrContains(*cmdline, token))
        << "pid " << pid;
  }
  ASSERT_FALSE(token.empty());
  EXPECT_NE(token, CurrentRpcAuth().token) << "strata run reused its caller's token";
  for (const std::string& e : EnvironmentOf(run->pid())) {
    EXPECT_NE(e, absl::StrCat(kRunTokenEnv, "=", token)) << "in strata's own environment";
  }

  run->Signal(SIGINT);
  EXPECT_TRUE(run->WaitFor(seconds(60))) << LogTail(o.log_path);
  // Nothing the run wrote (events with the command lines, logs, status, reports) holds it.
  for (const auto& entry : fs::recursive_directory_iterator(run_dir)) {
    if (!entry.is_regular_file()) continue;
    auto text = ReadFile(entry.path().string());
    ASSERT_TRUE(text.ok()) << entry.path();
    EXPECT_FALSE(absl::StrContains(*text, token)) << entry.path() << " holds the run token";
  }
  EXPECT_FALSE(absl::StrContains(ReadFile(o.log_path).value_or(""), token));
}

// The one exception to the token: the standard health check, which probes call without
// credentials. `strata-health` (run without a token) gets SERVING from every service; the health
// service's other method and near-miss paths are still refused.
TEST_F(AuthTest, TheHealthCheckAloneAnswersWithoutAToken) {
  ASSERT_NO_FATAL_FAILURE(LaunchAll());
  for (auto& [binary, s] : services_) {
    const Exit probe = RunWithoutToken({Bin("strata-health"), s.address}, dir_ + "/health.out");
    EXPECT_EQ(probe.code, 0) << binary << ": " << probe.output;
    EXPECT_TRUE(absl::StrContains(probe.output, "SERVING")) << binary << ": " << probe.output;
    for (const char* path : {"/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/Check/",
                             "/grpc.health.v1.Health/check", "/grpc.health.v1.Health/Checks"}) {
      const grpc::Status status = CallWithDefaultRequest(ChannelWithoutToken(s.address), path, "");
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << binary << " " << path << ": " << status.error_code() << " " << status.error_message();
    }
  }
  // A probe of nothing fails, naming the address.
  const Exit nothing = RunWithoutToken({Bin("strata-health"), "127.0.0.1:1", "--deadline-s", "2"},
                                       dir_ + "/health-none.out");
  EXPECT_EQ(nothing.code, 1) << nothing.output;
  EXPECT_TRUE(absl::StrContains(nothing.output, "127.0.0.1:1")) << nothing.output;
}

// A caller who opens more calls than a server has threads for: the excess is refused at once with
// RESOURCE_EXHAUSTED, the server keeps running, and once the flood ends it answers as before.
// WatchProgress holds a server thread until its caller goes away: a cheap way to hold many.
TEST_F(AuthTest, AFloodOfOpenCallsIsRefusedWithResourceExhaustedAndTheServerSurvives) {
  const std::string job = dir_ + "/job.yaml";
  ASSERT_NO_FATAL_FAILURE(
      Launch("strata-ps", {"--config", job, "--partition", "0", "--partitions", "1", "--workers",
                           "1", "--train-examples", "256", "--sample-budget", "0"}));
  const std::string address = services_.at("strata-ps").address;
  constexpr int kConnections = 8;
  // More than the threads of a server, fewer per connection than the stream limit.
  constexpr int kCallsPerConnection = (kMaxServerThreads + 200) / kConnections;
  static_assert(kCallsPerConnection <= kMaxStreamsPerConnection);
  struct Call {
    grpc::ClientContext context;
    v1::Progress progress;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncReader<v1::Progress>> reader;
  };
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    grpc::ChannelArguments args = DefaultChannelArguments();
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    stubs.push_back(v1::ParameterServer::NewStub(MakeChannel(address, args)));
    for (int i = 0; i < kCallsPerConnection; ++i) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
      call->reader = stubs.back()->PrepareAsyncWatchProgress(&call->context,
                                                             v1::WatchProgressRequest(), &queue);
      call->reader->StartCall(nullptr);
      call->reader->Finish(&call->status, call.get());
      calls.push_back(std::move(call));
    }
  }
  // Finish tags come back as calls end: the refused ones at once, the others when cancelled.
  int ended = 0, exhausted = 0;
  auto next = [&](std::chrono::seconds within) {
    void* tag = nullptr;
    bool ok = false;
    const auto status = queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + within);
    if (status != grpc::CompletionQueue::GOT_EVENT) return false;
    if (tag != nullptr) {
      ++ended;
      const grpc::Status& s = static_cast<Call*>(tag)->status;
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
    }
    return true;
  };
  while (exhausted == 0 && next(seconds(120))) {
  }
  EXPECT_GT(exhausted, 0) << "no call was refused; " << ended << " ended";
  EXPECT_FALSE(services_.at("strata-ps").process->Poll())
      << "the server died: " << LogTail(services_.at("strata-ps").process->log_path());
  for (auto& call : calls) call->context.TryCancel();
  while (ended < static_cast<int>(calls.size()) && next(seconds(120))) {
  }
  EXPECT_EQ(ended, static_cast<int>(calls.size()));
  queue.Shutdown();
  while (next(seconds(1))) {
  }
  // The server frees a cancelled WatchProgress thread at its next wake-up (at most 250 ms), so
  // right after the flood a call may still find every thread taken: it is refused with
  // RESOURCE_EXHAUSTED, never anything else, until the threads come back.
  const auto channel = MakeChannel(address);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  grpc::Status status;
  for (;;) {
    status = CallWithDefaultRequest(channel, "/strata.v1.ParameterServer/GetStatus", "");
    if (status.ok() || status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED ||
        std::chrono::steady_clock::now() > give_up) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
}

}  // namespace
}  // namespace strata
