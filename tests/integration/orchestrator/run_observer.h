// An observer of a running `strata run`, for the tests whose verdict must not be the product's
// own: it finds the run's processes in status.json, takes the run token from a service's
// environment (/proc/PID/environ, readable only by the user who runs the job, which the test is;
// docs/security.md), reads a parameter server's tensors the way the evaluator does (Pull with
// worker -1, which never waits on consistency rules) and its GetStatus counters, and compares
// tensors with a checkpoint file in its own loop. It also holds a process still (SIGSTOP) for as
// long as a check needs the run to stay where it is.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "services/common/wire/checkpoint.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/tensor_codec.h"
#include "services/common/wire/tls.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/support/server_pieces.h"

namespace strata::testing {

struct RunProcess {
  std::string name, address;
  int pid = 0;
};

// The processes status.json names (the services; the orchestrator is not among them).
inline std::vector<RunProcess> RunProcesses(const std::string& run_dir) {
  std::vector<RunProcess> out;
  const nlohmann::json s = ReadJson(run_dir + "/status.json");
  if (!s.is_object() || !s.contains("processes")) return out;
  for (const auto& p : s["processes"]) {
    out.push_back({p.value("name", ""), p.value("address", ""), p.value("pid", 0)});
  }
  return out;
}

inline std::optional<RunProcess> RunProcessNamed(const std::string& run_dir,
                                                 const std::string& name) {
  for (const RunProcess& p : RunProcesses(run_dir)) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

// A variable of a process's environment, as /proc/PID/environ holds it.
inline std::optional<std::string> EnvironmentOf(int pid, const std::string& key) {
  const std::string environ = Slurp("/proc/" + std::to_string(pid) + "/environ");
  size_t start = 0;
  while (start < environ.size()) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    const std::string entry = environ.substr(start, end - start);
    if (entry.rfind(key + "=", 0) == 0) return entry.substr(key.size() + 1);
    start = end + 1;
  }
  return std::nullopt;
}

// Makes this process a client of the run: its token (from a service's environment) and, for a run
// with security.tls, its CA (and under mutual its client pair) from `tls_dir` as the run keeps it.
inline absl::Status JoinRunAsObserver(const std::string& run_dir, TlsMode tls = TlsMode::kOff,
                                      const std::string& tls_dir = "",
                                      const std::string& server_name = kDefaultTlsServerName) {
  // Every service of the run has the same token; a restarted one's old pid may still be listed.
  std::optional<std::string> token;
  for (const RunProcess& p : RunProcesses(run_dir)) {
    if (p.pid > 0 && !token) token = EnvironmentOf(p.pid, kRunTokenEnv);
  }
  if (!token || token->empty()) {
    return absl::NotFoundError(
        absl::StrCat("no process of ", run_dir, "/status.json has ", kRunTokenEnv));
  }
  RpcAuth auth;
  auth.token = *token;
  if (tls != TlsMode::kOff) {
    TlsSettings settings;
    settings.mode = tls;
    settings.dir = tls_dir.empty() ? run_dir + "/tls" : tls_dir;
    settings.server_name = server_name;
    absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(settings, TlsUse::kClient);
    if (!material.ok()) return material.status();
    auth.tls = *material;
  }
  SetRpcAuth(std::move(auth));
  return absl::OkStatus();
}

// What a parameter server holds, read as an observer: its tensors and the versions its headers
// name.
struct ObservedPartition {
  std::vector<NamedTensor> tensors;
  std::vector<int64_t> versions;
};

inline absl::StatusOr<ObservedPartition> PullAsObserver(const std::string& address) {
  auto stub = v1::ParameterServer::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
  v1::PullRequest pull;
  pull.set_worker(-1);
  auto reader = stub->Pull(&context, pull);
  ObservedPartition out;
  std::vector<v1::TensorChunk> chunks;
  v1::PullResponse response;
  while (reader->Read(&response)) {
    if (response.has_header()) out.versions.push_back(response.header().version());
    if (response.has_chunk()) chunks.push_back(response.chunk());
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("Pull from ", address, ": ", status.error_message()));
  }
  absl::StatusOr<std::vector<NamedTensor>> tensors = DecodeAll(chunks);
  if (!tensors.ok()) return tensors.status();
  out.tensors = std::move(*tensors);
  return out;
}

inline absl::StatusOr<v1::ServerStatus> ServerStatusOf(const std::string& address) {
  auto stub = v1::ParameterServer::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
  v1::ServerStatus status;
  grpc::Status s = stub->GetStatus(&context, v1::ServerStatusRequest(), &status);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("GetStatus of ", address, ": ", s.error_message()));
  }
  return status;
}

// Every parameter and buffer of `checkpoint` must be on exactly one server, byte for byte, and the
// servers hold nothing else. A tensor split over the servers comes back as pieces named
// "<tensor>[<first row>:<end row>]", each compared with those rows. Returns what is not so, one
// line each (empty: they hold it exactly). The test's own loop: it shares no code with the
// orchestrator's handover check or the product's piece names. With `buffers` false, buffers
// (BatchNorm's running statistics, which every push replaces) are left out on both sides.
inline std::vector<std::string> DifferencesFromCheckpoint(
    const std::vector<ObservedPartition>& servers, const Checkpoint& checkpoint,
    bool buffers = true) {
  std::map<std::string, const NamedTensor*> expected;
  std::set<std::string> skipped;
  for (const CheckpointEntry& e : checkpoint.entries) {
    if (e.kind == TensorKind::kMomentum) continue;
    if (e.kind == TensorKind::kBuffer && !buffers) {
      skipped.insert(e.tensor.spec.name);
      continue;
    }
    expected[e.tensor.spec.name] = &e.tensor;
  }
  std::vector<std::string> differences;
  std::map<std::string, std::vector<int>> rows_seen;  // per tensor: how often each row came
  for (size_t p = 0; p < servers.size(); ++p) {
    for (const NamedTensor& t : servers[p].tensors) {
      const ServerPiece piece = ReadServerTensorName(t.spec.name);
      const std::string& name = piece.tensor;
      if (skipped.count(name)) continue;
      const std::string where = "ps-" + std::to_string(p) + " " + t.spec.name;
      auto it = expected.find(name);
      if (it == expected.end()) {
        differences.push_back(where + ": not in the checkpoint");
        continue;
      }
      const NamedTensor& whole = *it->second;
      const int64_t rows = whole.spec.shape.empty() ? 1 : whole.spec.shape[0];
      const int64_t first = piece.piece ? piece.first_row : 0;
      const int64_t end = piece.piece ? piece.end_row : rows;
      std::vector<int64_t> shape = whole.spec.shape;
      if (!shape.empty()) shape[0] = end - first;
      std::vector<int>& seen = rows_seen[name];
      seen.resize(static_cast<size_t>(rows), 0);
      bool twice = false;
      for (int64_t r = first; r < std::min(end, rows); ++r) twice |= ++seen[r] > 1;
      if (end > rows || t.spec.shape != shape) {
        differences.push_back(where + ": another shape");
      } else if (twice) {
        differences.push_back(where + ": on a second server");
      } else if (const std::vector<uint8_t> want = BytesFor(whole, piece); t.data != want) {
        size_t byte = 0;
        while (byte < t.data.size() && byte < want.size() && t.data[byte] == want[byte]) ++byte;
        differences.push_back(where + ": bytes differ from byte " + std::to_string(byte));
      }
    }
  }
  for (const auto& [name, tensor] : expected) {
    const auto seen = rows_seen.find(name);
    if (seen == rows_seen.end() ||
        std::find(seen->second.begin(), seen->second.end(), 0) != seen->second.end()) {
      differences.push_back(name + ": on no server");
    }
  }
  return differences;
}

// Pulls every server of the run as an observer and compares them with the checkpoint file.
// Returns the differences, or one line saying why the comparison could not be made.
inline std::vector<std::string> ServersAgainstCheckpoint(const std::string& run_dir, int servers,
                                                         const std::string& checkpoint_path,
                                                         bool buffers = true) {
  absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(checkpoint_path);
  if (!checkpoint.ok())
    return {"cannot read " + checkpoint_path + ": " + std::string(checkpoint.status().message())};
  std::vector<ObservedPartition> observed;
  for (int p = 0; p < servers; ++p) {
    const std::optional<RunProcess> ps = RunProcessNamed(run_dir, "ps-" + std::to_string(p));
    if (!ps) return {"status.json names no ps-" + std::to_string(p)};
    absl::StatusOr<ObservedPartition> read = PullAsObserver(ps->address);
    if (!read.ok()) return {std::string(read.status().message())};
    observed.push_back(std::move(*read));
  }
  return DifferencesFromCheckpoint(observed, *checkpoint, buffers);
}

// Holds a process still with SIGSTOP until Release or destruction (SIGCONT), so that a failed
// assertion never leaves it stopped. Holding the evaluator keeps a run from ending: the run waits
// for its final evaluation (the orchestrator's deadline for one is 10 minutes), while the workers
// and servers go on.
class HeldProcess {
 public:
  explicit HeldProcess(int pid) : pid_(pid) {
    if (pid_ > 0 && ::kill(pid_, SIGSTOP) != 0) pid_ = 0;
  }
  ~HeldProcess() { Release(); }
  HeldProcess(const HeldProcess&) = delete;
  HeldProcess& operator=(const HeldProcess&) = delete;
  bool held() const { return pid_ > 0; }
  void Release() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
};

// The first event of events.jsonl named `name` (null until there is one).
inline nlohmann::json FirstEvent(const std::string& run_dir, const std::string& name) {
  for (const auto& e : ReadLines(run_dir + "/events.jsonl")) {
    if (e.value("event", "") == name) return e;
  }
  return nullptr;
}

// Polls events.jsonl until `name` is there or the run ended (then null).
inline nlohmann::json AwaitEvent(const std::string& run_dir, BackgroundRun& run,
                                 const std::string& name,
                                 std::chrono::seconds timeout = std::chrono::seconds(300)) {
  nlohmann::json found;
  Eventually(
      [&] {
        found = FirstEvent(run_dir, name);
        return found.is_object() || run.Wait(std::chrono::seconds(0)) >= 0;
      },
      timeout);
  return found.is_object() ? found : nlohmann::json(nullptr);
}

}  // namespace strata::testing
