#include "orchestrator/lib/stream_run.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <nlohmann/json.hpp>

#include "orchestrator/launch/run_tls.h"
#include "orchestrator/launch/service_plan.h"
#include "orchestrator/record/drift_recovery.h"
#include "orchestrator/record/report.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/record/stream_run_metrics.h"
#include "orchestrator/run/control_server.h"
#include "orchestrator/run/stream_predict_load.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/process/child_process.h"
#include "services/common/process/interrupt.h"
#include "services/common/stream/embedded_broker.h"
#include "services/common/stream/replica_keys.h"
#include "services/common/stream/stream_broker.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "strata/v1/collective.grpc.pb.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {
namespace {

using StreamClock = std::chrono::steady_clock;

// A prediction passed on to a replica: the replica answers a request of up to 1,024 examples in
// milliseconds; seconds cover a loaded machine.
constexpr std::chrono::seconds kPredictDeadline{30};

// The replicas' final models agree when no replica's parameters differ from replica 0's by more
// than this, relative to the size of replica 0's (the L2 norms): only the order of the additions
// differs between them.
constexpr double kAgreementTolerance = 1e-5;

// stream.sync servers: how long writing the initial model, and each server's start, may take.
constexpr std::chrono::seconds kServerStartDeadline{120};
// The training-set size the servers of a stream are told: a stream has no epochs, and with this
// many examples none ends, so the servers' epoch-based schedule never moves.
constexpr int64_t kStreamTrainExamples = int64_t{1} << 40;

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "strata";
}

// Figures of one replica's progress or result file; an empty object while it has written none.
nlohmann::json ReadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return nlohmann::json::object();
  auto parsed = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : nlohmann::json::object();
}

int64_t Int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

class StreamRun {
 public:
  StreamRun(const LocalRunOptions& options, v1::ResolvedJob job, std::string run_dir)
      : options_(options), job_(std::move(job)), paths_(std::move(run_dir)) {}

  int Run() {
    started_ = StreamClock::now();
    if (absl::Status s = Prepare(); !s.ok()) {
      RemoveGeneratedTls(tls_, "strata run");
      std::fprintf(stderr, "strata run: %s; nothing was launched\n",
                   std::string(s.message()).c_str());
      return 2;
    }
    absl::Status status = Execute();
    StopEverything();
    RemoveGeneratedTls(tls_, "strata run");
    nlohmann::json summary = Summarise(status);
    const bool checks = summary.value("apply_once", false) && summary.value("agree", false);
    if (status.ok() && !checks) {
      status = absl::InternalError(
          absl::StrCat("the replicas' checks failed: apply_once ",
                       summary.value("apply_once", false) ? "true" : "false", ", agree ",
                       summary.value("agree", false) ? "true" : "false", " (summary.json)"));
      summary["state"] = "failed";
      summary["error"] = std::string(status.message());
    }
    record_->WriteSummary(summary);
    control_.reset();  // the replicas have ended: status.json names no socket any more
    WriteStatus(summary.value("state", "failed"), Progress());
    if (!status.ok()) {
      RunFailedEvent failed;
      failed.state = Interrupted() != 0 ? "interrupted" : "failed";
      failed.error = std::string(status.message());
      failed.process = failed_process_;
      record_->RunFailed(failed);
      WriteReport();
      std::fprintf(stderr, "strata run: %s: failed: %s\n", job_.name().c_str(),
                   std::string(status.message()).c_str());
      return Interrupted() != 0 ? 130 : 1;
    }
    record_->Event(RunEvent::kRunFinished, {{"state", "succeeded"}});
    WriteReport();
    std::printf(
        "strata run: %s finished: %lld events trained by %d replica(s) in %.1f s (%.0f events/s), "
        "%lld gradients applied on every replica, parameters agree to %.1e; summary in %s\n",
        job_.name().c_str(), static_cast<long long>(summary.value("events_trained", int64_t{0})),
        job_.cluster().workers(), summary.value("train_s", 0.0), summary.value("events_per_s", 0.0),
        static_cast<long long>(summary.value("gradients", int64_t{0})),
        summary.value("agreement_relative", 0.0), paths_.summary.c_str());
    if (const int64_t restarts = summary.value("replica_restarts", int64_t{0}); restarts > 0) {
      std::printf("strata run: %lld replica restart(s)", static_cast<long long>(restarts));
      if (summary.contains("lost_windows")) {
        // On the mesh: what no survivor had received when a replica died.
        std::printf("; %lld window(s) whose gradients died with a replica (lost_windows)",
                    static_cast<long long>(summary.value("lost_windows", int64_t{0})));
      }
      std::printf("\n");
    }
    return 0;
  }

 private:
  absl::Status Prepare() {
    for (const std::string& dir : {paths_.root, paths_.logs, paths_.ports, paths_.checkpoints,
                                   paths_.At(run_files::kStream)}) {
      STRATA_RETURN_IF_ERROR(MakeDirs(dir));
    }
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(paths_.job_yaml, JobSpecYaml(job_)));
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(paths_.job_resolved, ResolvedJobText(job_)));
    RpcAuth auth;
    STRATA_ASSIGN_OR_RETURN(auth.token, GenerateRunToken());
    if (TlsOn(job_)) {
      // Every server and replica serves and calls with the run's certificates; the orchestrator's
      // own calls (the servers' figures, the predict stream) present them too. The broker is
      // reached on its unix socket, or at stream.address as given.
      STRATA_ASSIGN_OR_RETURN(tls_, PrepareRunTls(job_, paths_.tls, /*attached=*/false));
      auth.tls = tls_.client;
    }
    SetRpcAuth(std::move(auth));
    STRATA_ASSIGN_OR_RETURN(nonce_, GenerateRunToken());
    nonce_ = nonce_.substr(0, 16);
    STRATA_ASSIGN_OR_RETURN(record_, RunRecord::Open(paths_.root, started_));
    record_->Event(RunEvent::kRunStarted, {{"name", job_.name()},
                                           {"job", options_.job_path},
                                           {"overrides", options_.overrides},
                                           {"strategy", "stream"},
                                           {"tls", Spelled(job_.security().tls())},
                                           {"orchestrator_pid", ::getpid()}});
    InstallInterruptHandlers();
    StartControlServer();
    StartRunMetrics();
    return absl::OkStatus();
  }

  // The run's own Prometheus endpoint (the broker's backlog, rates, latencies); a run goes on
  // without it.
  void StartRunMetrics() {
    if (!job_.metrics().enabled()) return;
    MetricsEndpointOptions endpoint;
    endpoint.listen = absl::StrCat(HeadListenHost(options_.hosts), ":0");
    endpoint.port_file = paths_.OrchestratorMetricsPortFile();
    auto served = StreamRunMetrics::Start(endpoint);
    if (!served.ok()) {
      Say(absl::StrCat("strata run: the orchestrator serves no metrics (",
                       served.status().message(), "); the run goes on"));
      return;
    }
    run_metrics_ = std::move(*served);
  }

  // `strata status` asks it whether the run lives, `strata predict` asks the replicas through it.
  // A run goes on without it.
  void StartControlServer() {
    v1::RunInfo info;
    info.set_name(job_.name());
    info.set_run_dir(paths_.root);
    info.set_pid(::getpid());
    info.set_strategy("stream");
    info.set_phase("stream");
    info.set_replicas(job_.cluster().workers());
    auto control = RunControlServer::Start(
        paths_.root, [info] { return info; },
        [this](const v1::RunPredictRequest& request, v1::PredictReply* reply) {
          return ForwardPredict(request, reply);
        });
    if (!control.ok()) {
      Say(absl::StrCat("strata run: no control socket (", control.status().message(),
                       "); `strata predict` answers only once the run has finished"));
      return;
    }
    control_ = std::move(*control);
  }

  // On a gRPC thread of the control server: reads only what does not change during the run.
  grpc::Status ForwardPredict(const v1::RunPredictRequest& request, v1::PredictReply* reply) const {
    const int world = job_.cluster().workers();
    if (request.replica() < 0 || request.replica() >= world) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("there is no replica ", request.replica(), ": the run has ",
                                       world, " (0 to ", world - 1, ")"));
    }
    auto address = ReplicaAddress(request.replica());
    if (!address.ok()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("replica ", request.replica(), " is not serving yet"));
    }
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(kPredictDeadline));
    return v1::StreamReplica::NewStub(MakeChannel(*address))
        ->Predict(&context, request.request(), reply);
  }

  // Where replica r serves (its port file, written once it listens); an error before that.
  absl::StatusOr<std::string> ReplicaAddress(int r) const {
    STRATA_ASSIGN_OR_RETURN(std::string port,
                            ReadFile(paths_.PortFile(absl::StrCat("worker-", r))));
    while (!port.empty() && port.back() == '\n') port.pop_back();
    return absl::StrCat(ReplicaListenHost(r), ":", port);
  }

  bool OnAnEmulatedHost(const std::string& address) const {
    for (const EmulatedHost& h : options_.hosts->hosts()) {
      if (h.address == address) return true;
    }
    return false;
  }

  // Where replica r's servers listen: its emulated host's address (strata run --hosts), or
  // loopback. Replicas take the hosts after the head in turn, as a local run's services do.
  std::string ReplicaListenHost(int r) const {
    return ListenHostOf(HostOf(ServiceIndexOfReplica(r)));
  }

  absl::Status Execute() {
    const v1::ResolvedStream& stream = job_.stream();
    const std::string exchange =
        stream.sync() == v1::STREAM_SYNC_ALLREDUCE
            ? std::string("gradients summed by a synchronous all-reduce each step")
        : ThroughServers()
            ? absl::StrCat("each window's gradient pushed to ", job_.cluster().parameter_servers(),
                           " parameter server(s) (ASP)")
            : absl::StrCat(stream.max_grad_buffer(), " gradient(s) per send");
    Say(absl::StrFormat(
        "strata run: %s: %s on %s, strategy stream, %d replica(s), windows of %d events, %s; "
        "run directory %s",
        job_.name(), ModelText(job_), Spelled(job_.dataset().name()), job_.cluster().workers(),
        stream.batch_events(), exchange, paths_.root));
    STRATA_RETURN_IF_ERROR(StartBroker());
    StreamBrokerOptions broker_options;
    broker_options.who = "strata run";
    STRATA_ASSIGN_OR_RETURN(broker_, ConnectStreamBroker(address_, broker_options));
    // Before the producer and the clock: writing the initial model and starting the servers are
    // not the stream's time.
    if (ThroughServers()) STRATA_RETURN_IF_ERROR(LaunchServers());
    // Before the producer: the group reads the stream from its start.
    STRATA_RETURN_IF_ERROR(broker_->CreateGroup(stream.key(), stream.group(), "0"));
    if (embedded_) STRATA_RETURN_IF_ERROR(StartProducer());
    launched_ = StreamClock::now();
    STRATA_RETURN_IF_ERROR(LaunchReplicas());
    STRATA_RETURN_IF_ERROR(StartPredictLoad());
    record_->Event(RunEvent::kTrainingStarted, {{"mode", "stream"},
                                                {"replicas", job_.cluster().workers()},
                                                {"worker_batch", job_.stream().batch_events()}});
    STRATA_RETURN_IF_ERROR(Watch());
    ReadServerFigures();
    return absl::OkStatus();
  }

  bool ThroughServers() const { return job_.stream().sync() == v1::STREAM_SYNC_SERVERS; }

  // A server or a replica, service `index` (its emulated host's), listening on `listen_host`:
  // the run's certificates (security.tls), its metrics endpoint, its log, its host; launched and
  // recorded. `o` keeps what it was started with, for a restart.
  absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnService(SpawnOptions& o, int index,
                                                             const std::string& listen_host) {
    if (TlsOn(job_)) {
      const std::vector<std::string> tls = TlsServiceArgs(job_, tls_.dir);
      o.argv.insert(o.argv.end(), tls.begin(), tls.end());
    }
    if (job_.metrics().enabled()) {
      o.argv.insert(o.argv.end(), {"--metrics-listen", absl::StrCat(listen_host, ":0"),
                                   "--metrics-port-file", paths_.MetricsPortFile(o.name)});
    }
    o.log_path = paths_.ServiceLog(o.name);
    if (const EmulatedHost* host = HostOf(index)) {
      o.network_namespace = host->network_namespace;
      o.cpu_group = host->cpu_group;
    }
    return Launch(o, index);
  }

  // Starts `o` (again, for a restart) and records the launch, with its host.
  absl::StatusOr<std::unique_ptr<ChildProcess>> Launch(const SpawnOptions& o, int index) {
    STRATA_ASSIGN_OR_RETURN(auto child, ChildProcess::Spawn(o));
    nlohmann::json launched = {{"process", o.name}, {"pid", child->pid()}};
    if (const EmulatedHost* host = HostOf(index)) launched["host"] = host->name;
    record_->Event(RunEvent::kLaunched, std::move(launched));
    return child;
  }

  // stream.sync servers: the job's initial model (written as a `ps` run writes it), then the
  // servers (ASP: the job's checks refuse another consistency), each announcing its port in a port
  // file; their addresses go to the replicas. A stream has no epochs: the servers keep no sample
  // budget, and count a training set so large that no epoch ends (the learning-rate schedule stays
  // where it starts; a replica's own rate, stream.lr_decay_events, travels with each push).
  absl::Status LaunchServers() {
    const std::string init = paths_.InitCheckpoint();
    // The task a `ps` run gives its launcher, spawned here.
    const TaskSpec task = InitCheckpointTask(paths_, init);
    SpawnOptions writer;
    writer.name = task.name;
    writer.argv = {absl::StrCat(options_.bin_dir, "/", task.binary)};
    writer.argv.insert(writer.argv.end(), task.args.begin(), task.args.end());
    writer.log_path = paths_.ServiceLog(task.name);
    STRATA_ASSIGN_OR_RETURN(auto written, ChildProcess::Spawn(writer));
    if (!written->WaitFor(kServerStartDeadline) || !written->succeeded()) {
      return absl::AbortedError(
          absl::StrCat("writing the initial model: strata-evaluator ",
                       written->exited() ? written->ExitDescription() : "did not finish in time",
                       "; the end of its log:\n", LogTail(written->log_path())));
    }
    const std::string ps = absl::StrCat(options_.bin_dir, "/strata-ps");
    for (int p = 0; p < job_.cluster().parameter_servers(); ++p) {
      SpawnOptions o;
      o.name = absl::StrCat("ps-", p);
      const std::string listen_host = ListenHostOf(HostOf(p));
      o.argv = {ps,
                "--partition",
                std::to_string(p),
                "--job",
                paths_.job_resolved,
                "--run-dir",
                paths_.root,
                "--init-checkpoint",
                init,
                "--train-examples",
                std::to_string(kStreamTrainExamples),
                "--sample-budget",
                "0",
                "--checkpoint-every-s",
                "0",
                "--listen",
                absl::StrCat(listen_host, ":0"),
                "--port-file",
                paths_.PortFile(o.name)};
      STRATA_ASSIGN_OR_RETURN(auto child, SpawnService(o, p, listen_host));
      STRATA_ASSIGN_OR_RETURN(
          const int port, WaitForPortFile(*child, paths_.PortFile(o.name), kServerStartDeadline));
      server_addresses_.push_back(absl::StrCat(listen_host, ":", port));
      servers_.push_back(std::move(child));
    }
    Say(absl::StrCat("parameter servers at ", absl::StrJoin(server_addresses_, ", ")));
    return absl::OkStatus();
  }

  // The emulated host of service i (servers first, then replicas, as a local run places them);
  // none without --hosts.
  const EmulatedHost* HostOf(int i) const {
    return options_.hosts ? &options_.hosts->ForService(i) : nullptr;
  }
  // Replica r's place among the services: after the servers under stream.sync servers.
  int ServiceIndexOfReplica(int r) const {
    return ThroughServers() ? job_.cluster().parameter_servers() + r : r;
  }

  // stream.sync servers: what each server says it applied, the witness of apply-once (each
  // replica's every window pushed, and applied, exactly once).
  void ReadServerFigures() {
    for (size_t p = 0; p < server_addresses_.size(); ++p) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(kPredictDeadline));
      v1::ServerStatus status;
      const grpc::Status asked = v1::ParameterServer::NewStub(MakeChannel(server_addresses_[p]))
                                     ->GetStatus(&context, v1::ServerStatusRequest(), &status);
      nlohmann::json figures = {{"server", p}, {"address", server_addresses_[p]}};
      if (asked.ok()) {
        figures["pushes"] = status.pushes();
        figures["samples"] = status.samples();
        figures["version"] = status.version();
        figures["rejected_pushes"] = status.rejected_pushes();
      } else {
        figures["error"] = asked.error_message();
      }
      server_figures_.push_back(std::move(figures));
    }
  }

  absl::Status StartBroker() {
    if (!job_.stream().address().empty()) {
      STRATA_ASSIGN_OR_RETURN(address_, ParseBrokerAddress(job_.stream().address()));
      if (options_.hosts && address_.unix_path.empty() && !OnAnEmulatedHost(address_.host)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "stream.address ", job_.stream().address(),
            " is not the address of one of the emulated hosts, and the replicas there reach "
            "nothing else; run the broker on a host and give its address, or leave "
            "stream.address out (the run's own broker serves every host through its socket)"));
      }
      Say(absl::StrCat("broker: ", address_.Describe()));
      return absl::OkStatus();
    }
    // A short directory of its own: a unix socket's path has at most 107 bytes, and a run
    // directory can be deep.
    char dir[] = "/tmp/strata-broker-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return absl::InternalError("cannot make the broker's directory");
    broker_dir_ = dir;
    EmbeddedBrokerOptions options;
    options.directory = broker_dir_;
    STRATA_ASSIGN_OR_RETURN(embedded_, EmbeddedBroker::Start(options));
    address_ = embedded_->address();
    record_->Event(RunEvent::kLaunched,
                   {{"process", "broker"}, {"socket", embedded_->socket_path()}});
    Say(absl::StrCat("broker: the run's own redis-server on ", embedded_->socket_path()));
    return absl::OkStatus();
  }

  absl::Status StartProducer() {
    SpawnOptions o;
    o.name = "producer";
    o.argv = {SelfPath(), "produce", paths_.job_yaml, "--address", embedded_->socket_path()};
    if (job_.stream().max_events() > 0) {
      o.argv.insert(o.argv.end(), {"--max-events", std::to_string(job_.stream().max_events())});
    }
    o.log_path = paths_.ServiceLog("producer");
    STRATA_ASSIGN_OR_RETURN(producer_, ChildProcess::Spawn(o));
    record_->Event(RunEvent::kLaunched, {{"process", "producer"}, {"pid", producer_->pid()}});
    return absl::OkStatus();
  }

  // stream.predict_rate: the questions start once the replicas serve.
  absl::Status StartPredictLoad() {
    if (job_.stream().predict_rate() <= 0) return absl::OkStatus();
    PredictLoadOptions options;
    options.broker = address_;
    options.key = job_.stream().key();
    options.share = job_.stream().predict_rate();
    options.replicas = job_.cluster().workers();
    options.replica_address = [this](int r) { return ReplicaAddress(r); };
    STRATA_ASSIGN_OR_RETURN(predict_load_, PredictLoad::Start(std::move(options)));
    Say(absl::StrFormat("predictions: %.2f %% of the events go to Predict as they arrive",
                        100 * job_.stream().predict_rate()));
    return absl::OkStatus();
  }

  absl::Status LaunchReplicas() {
    const std::string worker = absl::StrCat(options_.bin_dir, "/strata-worker");
    for (int r = 0; r < job_.cluster().workers(); ++r) {
      SpawnOptions o;
      o.name = absl::StrCat("worker-", r);
      const std::string listen_host = ReplicaListenHost(r);
      o.argv = {worker,
                "--rank",
                std::to_string(r),
                "--job",
                paths_.job_resolved,
                "--run-dir",
                paths_.root,
                "--listen",
                absl::StrCat(listen_host, ":0"),
                "--port-file",
                paths_.PortFile(o.name),
                "--stream-address",
                address_.unix_path.empty()
                    ? absl::StrCat("redis://", address_.host, ":", address_.port)
                    : address_.unix_path,
                "--stream-run",
                nonce_};
      if (ThroughServers()) {
        o.argv.insert(o.argv.end(), {"--parameter-servers", absl::StrJoin(server_addresses_, ",")});
      }
      // On emulated hosts the broker's socket is a file of the shared file system: the events
      // reach a replica without crossing the emulated links, the gradients between replicas
      // cross them.
      STRATA_ASSIGN_OR_RETURN(auto child, SpawnService(o, ServiceIndexOfReplica(r), listen_host));
      replicas_.push_back(std::move(child));
      replica_spawns_.push_back(std::move(o));
    }
    replica_restarts_.assign(replicas_.size(), 0);
    return absl::OkStatus();
  }

  // A replica that ended badly is started again, up to recovery.restarts times, with its own
  // arguments; the broker keeps its counts and the events it had not acknowledged: it takes them
  // up and trains on. Through servers the servers hold the model it trained into. On the mesh the
  // run first declares the recovery on the broker: the survivors agree on one model, and the new
  // incarnation takes it (docs/protocol.md, "When a replica of the mesh dies"). True when it was
  // started again; false when it may not be (out of restarts, or the all-reduce, whose replicas
  // wait in every step for each other), and the run fails.
  absl::StatusOr<bool> RestartReplica(size_t r) {
    if (job_.stream().sync() == v1::STREAM_SYNC_ALLREDUCE ||
        replica_restarts_[r] >= job_.recovery().restarts()) {
      return false;
    }
    ChildProcess& dead = *replicas_[r];
    if (!ThroughServers()) {
      STRATA_ASSIGN_OR_RETURN(const bool recoverable, MeshCanRecover(dead));
      if (!recoverable) return false;
    }
    const int attempt = ++replica_restarts_[r];
    if (!ThroughServers()) {
      ++mesh_recoveries_;
      STRATA_RETURN_IF_ERROR(broker_->PutField(stream_keys::Recoveries(job_.stream(), nonce_),
                                               std::to_string(mesh_recoveries_),
                                               std::to_string(r)));
    }
    record_->Event(RunEvent::kProcessExited,
                   {{"process", dead.name()}, {"how", dead.ExitDescription()}});
    record_->Event(RunEvent::kRestart, {{"process", dead.name()},
                                        {"reason", dead.ExitDescription()},
                                        {"restart", attempt},
                                        {"of", job_.recovery().restarts()}});
    Say(absl::StrCat(dead.name(), " ", dead.ExitDescription(), "; started again (restart ", attempt,
                     " of ", job_.recovery().restarts(), ")"));
    STRATA_ASSIGN_OR_RETURN(auto child, Launch(replica_spawns_[r], ServiceIndexOfReplica(r)));
    replicas_[r] = std::move(child);
    return true;
  }

  // On the mesh a replica's own error (an exit code) is its verdict, often on a recovery it took
  // part in: only a death (a signal) is recovered, and one at a time. The survivors agree on the
  // model the new process takes: a replica alone has none to agree with, and one that has
  // finished takes no part.
  absl::StatusOr<bool> MeshCanRecover(const ChildProcess& dead) {
    if (!dead.killed_by_signal() || replicas_.size() < 2) return false;
    std::string why;
    for (const auto& replica : replicas_) {
      if (replica->exited() && replica->succeeded())
        why = absl::StrCat("after ", replica->name(), " finished");
    }
    if (why.empty() && mesh_recoveries_ > 0) {
      STRATA_ASSIGN_OR_RETURN(auto connected,
                              broker_->Fields(stream_keys::RecoveryStep(
                                  job_.stream(), nonce_, mesh_recoveries_, "connected")));
      if (connected.empty()) why = absl::StrCat("during recovery ", mesh_recoveries_);
    }
    if (why.empty()) return true;
    Say(absl::StrCat(dead.name(), " ", dead.ExitDescription(), " ", why, ": not started again"));
    return false;
  }

  // Until every replica has ended; a progress line and a metrics line about once a second.
  absl::Status Watch() {
    auto next_line = StreamClock::now();
    int64_t trained_before = 0;
    auto line_before = StreamClock::now();
    while (true) {
      if (Interrupted() != 0) return absl::CancelledError("interrupted");
      bool all_done = true, failed = false, any_ended = false;
      for (size_t r = 0; r < replicas_.size(); ++r) {
        ChildProcess& replica = *replicas_[r];
        if (!replica.Poll()) {
          all_done = false;
        } else if (replica.succeeded()) {
          any_ended = true;
        } else {
          STRATA_ASSIGN_OR_RETURN(const bool restarted, RestartReplica(r));
          all_done = all_done && !restarted;
          any_ended = any_ended || !restarted;
          failed = failed || !restarted;
        }
      }
      if (predict_load_ && (any_ended || StreamEnding())) StopPredictLoad();
      if (failed) return ReplicaFailure();
      for (auto& server : servers_) {
        if (!server->Poll()) continue;
        failed_process_ = server->name();
        record_->Event(RunEvent::kProcessExited,
                       {{"process", server->name()}, {"how", server->ExitDescription()}});
        return absl::AbortedError(absl::StrCat(server->name(), " ", server->ExitDescription(),
                                               "; the end of its log:\n",
                                               LogTail(server->log_path())));
      }
      if (producer_ && producer_->Poll() && !producer_->succeeded()) {
        return absl::AbortedError(absl::StrCat("the producer ", producer_->ExitDescription(),
                                               "; the end of its log:\n",
                                               LogTail(producer_->log_path())));
      }
      const auto now = StreamClock::now();
      if (all_done || now >= next_line) {
        nlohmann::json line = Progress();
        const int64_t trained = Int(line, "events_trained");
        const double seconds = std::chrono::duration<double>(now - line_before).count();
        line["trained_per_s"] = seconds > 0 ? (trained - trained_before) / seconds : 0.0;
        if (predict_load_) {
          line["predict_p99_ms"] = predict_load_->TakeRecentP99Ms();
          line["predictions_answered"] = predict_load_->Answered();
        }
        trained_before = trained;
        line_before = now;
        (void)record_->Metrics(line);
        if (run_metrics_) run_metrics_->Update(line);
        WriteStatus("running", line);
        Say(ProgressText(line));
        if (now >= next_report_) {
          WriteReport();
          next_report_ = now + std::chrono::seconds(kReportRefreshSeconds);
        }
        next_line = now + std::chrono::seconds(1);
      }
      if (all_done) break;
      // Polling children and the broker: nothing here waits on a condition another thread sets.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    trained_at_ = StreamClock::now();
    StopPredictLoad();
    record_->Event(RunEvent::kTrainingFinished, {});
    return absl::OkStatus();
  }

  // Whether the replicas are about to stop reading: the group has been handed
  // stream.max_events, or stream.max_seconds have passed on this clock, which started before
  // theirs (they count from finding each other).
  bool StreamEnding() {
    const v1::ResolvedStream& stream = job_.stream();
    if (stream.max_seconds() > 0 &&
        std::chrono::duration<double>(StreamClock::now() - launched_).count() >=
            stream.max_seconds()) {
      return true;
    }
    if (stream.max_events() <= 0) return false;
    auto group = broker_->GroupInfo(stream.key(), stream.group());
    return group.ok() && group->entries_read >= stream.max_events();
  }

  // Stops the questions once the stream is ending or a replica has ended (a question to a replica
  // that has gone says nothing about the predict stream), keeping the figures.
  void StopPredictLoad() {
    if (!predict_load_) return;
    predict_figures_ = predict_load_->Figures();
    predict_load_.reset();
  }

  // A replica ended badly. Its peers soon fail too (their streams to it break), so the culprit is
  // told from the consequences: the replicas that end within a short grace are collected, and one
  // killed by a signal, else the first found, is named first.
  absl::Status ReplicaFailure() {
    const auto grace_end = StreamClock::now() + std::chrono::seconds(2);
    while (StreamClock::now() < grace_end) {
      bool all_ended = true;
      for (auto& replica : replicas_) all_ended = replica->Poll() && all_ended;
      if (all_ended) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling the children
    }
    ChildProcess* culprit = nullptr;
    std::vector<std::string> others;
    for (auto& replica : replicas_) {
      if (!replica->exited() || replica->succeeded()) continue;
      record_->Event(RunEvent::kProcessExited,
                     {{"process", replica->name()}, {"how", replica->ExitDescription()}});
      const bool signalled = replica->exit_code() > 128;
      if (culprit == nullptr || (signalled && culprit->exit_code() <= 128)) {
        if (culprit != nullptr) others.push_back(culprit->name());
        culprit = replica.get();
      } else {
        others.push_back(replica->name());
      }
    }
    failed_process_ = culprit->name();
    return absl::AbortedError(absl::StrCat(
        culprit->name(), " ", culprit->ExitDescription(),
        others.empty() ? "" : absl::StrCat(" (then ", absl::StrJoin(others, ", "), " failed)"),
        "; the end of its log:\n", LogTail(culprit->log_path())));
  }

  nlohmann::json Progress() {
    nlohmann::json line = {{"wall_s", Seconds(StreamClock::now())}};
    const v1::ResolvedStream& stream = job_.stream();
    if (auto length = broker_->Length(stream.key()); length.ok()) line["stream_length"] = *length;
    if (auto group = broker_->GroupInfo(stream.key(), stream.group()); group.ok()) {
      line["handed_out"] = group->entries_read;
      line["lag"] = group->lag;
      line["pending"] = group->pending;
    }
    // What each replica holds unacknowledged: its share of the group's backlog.
    if (auto pending = broker_->Pending(stream.key(), stream.group()); pending.ok()) {
      nlohmann::json per = nlohmann::json::object();
      for (const auto& [consumer, count] : pending->per_consumer) per[consumer] = count;
      line["pending_per_replica"] = per;
    }
    int64_t trained = 0, correct = 0, scored = 0, recent_correct = 0, recent_scored = 0;
    std::vector<int64_t> applied;
    double loss = 0, latency_p50 = 0, latency_p99 = 0;
    int reporting = 0;
    for (int r = 0; r < job_.cluster().workers(); ++r) {
      nlohmann::json p = ReadJson(paths_.StreamReplicaResult(r));
      if (p.empty()) p = ReadJson(paths_.StreamReplicaProgress(r));
      trained += Int(p, "events_trained");
      correct += Int(p, "prequential_correct");
      scored += Int(p, "prequential_scored");
      recent_correct += Int(p, "recent_correct");
      recent_scored += Int(p, "recent_scored");
      applied.push_back(Int(p, "applied_total"));
      // Each replica's latencies of its latest second: the run's line takes the worst.
      if (auto it = p.find("recent_latency"); it != p.end() && it->value("events", 0) > 0) {
        latency_p50 = std::max(latency_p50, it->value("p50_ms", 0.0));
        latency_p99 = std::max(latency_p99, it->value("p99_ms", 0.0));
      }
      RecordDrifts(r, p);
      if (p.contains("last_loss")) {
        loss += p["last_loss"].get<double>();
        ++reporting;
      }
    }
    line["events_trained"] = trained;
    line["events_scored"] = scored;
    if (latency_p99 > 0) {
      line["latency_p50_ms"] = latency_p50;  // from production to training, the worst replica's
      line["latency_p99_ms"] = latency_p99;
    }
    line["applied"] = applied;
    if (reporting > 0) line["loss"] = loss / reporting;
    if (scored > 0) line["prequential_accuracy"] = static_cast<double>(correct) / scored;
    if (recent_scored > 0) {
      line["recent_accuracy"] = static_cast<double>(recent_correct) / recent_scored;
    }
    return line;
  }

  // The detections a replica reports that events.jsonl does not have yet.
  void RecordDrifts(int rank, const nlohmann::json& figures) {
    auto it = figures.find("drifts");
    if (it == figures.end() || !it->is_array()) return;
    size_t& recorded = drifts_recorded_[rank];
    for (size_t i = recorded; i < it->size(); ++i) {
      const nlohmann::json& d = (*it)[i];
      if (!d.is_object()) continue;
      nlohmann::json event = {{"replica", rank},
                              {"events", d.value("events", int64_t{0})},
                              {"seq", d.value("seq", int64_t{-1})},
                              {"error_before", d.value("error_before", 0.0)},
                              {"error_after", d.value("error_after", 0.0)}};
      if (d.value("lr_reset", false)) {  // stream.on_drift reset_lr
        event["lr_before"] = d.value("lr_before", 0.0);
        event["lr_after"] = job_.training().lr();
      }
      record_->Event(RunEvent::kDriftDetected, event);
    }
    recorded = std::max(recorded, it->size());
  }

  static std::string ProgressText(const nlohmann::json& line) {
    return absl::StrFormat(
        "stream: %lld events in the stream, %lld handed out, %lld trained (%.0f/s), lag %lld, "
        "pending %lld, loss %.4f, accuracy before training %.3f (latest events %.3f), applied per "
        "replica %s",
        static_cast<long long>(line.value("stream_length", int64_t{0})),
        static_cast<long long>(line.value("handed_out", int64_t{0})),
        static_cast<long long>(line.value("events_trained", int64_t{0})),
        line.value("trained_per_s", 0.0), static_cast<long long>(line.value("lag", int64_t{0})),
        static_cast<long long>(line.value("pending", int64_t{0})), line.value("loss", 0.0),
        line.value("prequential_accuracy", 0.0), line.value("recent_accuracy", 0.0),
        line["applied"].dump());
  }

  // report.html; a run goes on without it.
  void WriteReport() const {
    if (absl::Status s = WriteRunReport(paths_.root); !s.ok()) {
      std::fprintf(stderr, "strata run: report.html: %s\n", std::string(s.message()).c_str());
    }
  }

  // status.json, what `strata status` shows of a stream run: the state and the last progress line.
  void WriteStatus(const std::string& state, nlohmann::json line) const {
    line["state"] = state;
    line["name"] = job_.name();
    line["strategy"] = "stream";
    line["replicas"] = job_.cluster().workers();
    line["orchestrator_pid"] = ::getpid();
    if (control_ && state == "running") line["control_socket"] = control_->socket_path();
    if (run_metrics_ && state == "running") line["orchestrator_metrics"] = run_metrics_->url();
    line["updated"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    record_->WriteStatus(line);
  }

  // The apply-once and agreement checks over what the replicas wrote, and the run's figures.
  nlohmann::json Summarise(const absl::Status& status) {
    const int world = job_.cluster().workers();
    nlohmann::json summary = {{"name", job_.name()},
                              {"strategy", "stream"},
                              {"arch", ModelText(job_)},
                              {"dataset", Spelled(job_.dataset().name())},
                              {"workers", world},
                              {"replicas", world},
                              {"state", status.ok() ? "succeeded" : "failed"},
                              {"batch_events", job_.stream().batch_events()},
                              {"max_grad_buffer", job_.stream().max_grad_buffer()},
                              {"sync", Spelled(job_.stream().sync())},
                              {"wall_s", Seconds(StreamClock::now())}};
    if (!status.ok()) summary["error"] = std::string(status.message());
    std::vector<nlohmann::json> results;
    int64_t gradients = 0, trained = 0, malformed = 0, acknowledged = 0, correct = 0, scored = 0,
            frozen = 0;
    double train_s = 0, latency_p50 = 0, latency_p99 = 0;
    std::map<std::string, int64_t> staleness;
    for (int r = 0; r < world; ++r) {
      nlohmann::json result = ReadJson(paths_.StreamReplicaResult(r));
      gradients += Int(result, "windows");
      trained += Int(result, "events_trained");
      malformed += Int(result, "malformed");
      acknowledged += Int(result, "acknowledged");
      correct += Int(result, "prequential_correct");
      scored += Int(result, "prequential_scored");
      frozen += Int(result, "events_frozen");
      if (auto it = result.find("latency"); it != result.end() && it->value("events", 0) > 0) {
        latency_p50 = std::max(latency_p50, it->value("p50_ms", 0.0));
        latency_p99 = std::max(latency_p99, it->value("p99_ms", 0.0));
      }
      train_s = std::max(train_s, result.value("seconds", 0.0));
      if (result.contains("staleness")) {
        for (const auto& [s, n] : result["staleness"].items()) staleness[s] += n.get<int64_t>();
      }
      results.push_back(std::move(result));
    }
    // Apply-once: every replica applied each replica's gradients, as many as it trained (through
    // servers: pushed its own, and the servers applied them all, below).
    bool apply_once = !results.empty();
    for (const nlohmann::json& result : results) {
      const auto applied = result.value("applied", std::vector<int64_t>{});
      if (static_cast<int>(applied.size()) != world) {
        apply_once = false;
        continue;
      }
      for (int o = 0; o < world; ++o) {
        // Through servers a replica applies nothing itself: it counts its own pushes only.
        if (ThroughServers() && o != result.value("rank", -1)) continue;
        if (applied[static_cast<size_t>(o)] != Int(results[static_cast<size_t>(o)], "windows")) {
          apply_once = false;
        }
      }
    }
    int64_t restarts = 0;
    for (int n : replica_restarts_) restarts += n;
    if (ThroughServers()) {
      // Every server applied each window's gradient once: its pushes are the windows trained by
      // every replica together (what the replicas counted above only says each pushed its own).
      // A replica that died after a push and before counting it (it counts once the window's
      // events are acknowledged) left one push more than its counts say, and that window's events
      // were trained again: so with restarts, at most one push more per restart.
      int64_t windows = 0;
      for (const nlohmann::json& result : results) windows += Int(result, "windows");
      apply_once = apply_once && !server_figures_.empty();
      for (const nlohmann::json& server : server_figures_) {
        const int64_t pushes = server.value("pushes", int64_t{-1});
        apply_once = apply_once && pushes >= windows && pushes <= windows + restarts;
      }
      summary["servers"] = server_figures_;
    }
    int64_t lost_windows = 0;
    for (const nlohmann::json& result : results) lost_windows += Int(result, "lost_windows");
    summary["replica_restarts"] = restarts;
    // On the mesh: gradients a dead replica had applied and no survivor had received.
    if (job_.stream().sync() == v1::STREAM_SYNC_MESH) summary["lost_windows"] = lost_windows;
    summary["per_replica"] = results;
    summary["gradients"] = gradients;
    summary["events_trained"] = trained;
    summary["events_frozen"] = frozen;  // scored and not trained (stream.freeze_at_event)
    if (latency_p99 > 0) {
      // Production to training over each replica's latest 100,000 events, the worst replica's.
      summary["latency_p50_ms"] = latency_p50;
      summary["latency_p99_ms"] = latency_p99;
    }
    summary["malformed"] = malformed;
    summary["acknowledged"] = acknowledged;
    summary["apply_once"] = apply_once;
    summary["staleness"] = staleness;
    summary["train_s"] = train_s;
    summary["events_per_s"] = train_s > 0 ? trained / train_s : 0.0;
    // Each window scored by its replica's model before its own gradient went in (test-then-train).
    summary["prequential_accuracy"] = scored > 0 ? static_cast<double>(correct) / scored : 0.0;
    nlohmann::json drifts = nlohmann::json::array();
    for (const nlohmann::json& result : results) {
      if (!result.contains("drifts")) continue;
      for (nlohmann::json d : result["drifts"]) {
        d["replica"] = result.value("rank", 0);
        drifts.push_back(std::move(d));
      }
    }
    summary["drifts"] = drifts;
    if (auto recovery = ReadDriftRecovery(results, job_.stream().produce().drift().at_event())) {
      summary["drift_recovery"] = DriftRecoveryJson(*recovery);
    }
    if (broker_) {
      const v1::ResolvedStream& stream = job_.stream();
      if (auto group = broker_->GroupInfo(stream.key(), stream.group()); group.ok()) {
        summary["handed_out"] = group->entries_read;
        summary["pending_after"] = group->pending;
      }
    }
    if (!predict_figures_.is_null()) summary["predictions"] = predict_figures_;
    Agreement(&summary);
    return summary;
  }

  // How far each replica's final parameters are from replica 0's.
  void Agreement(nlohmann::json* summary) const {
    auto first = ReadCheckpoint(paths_.StreamReplicaModel(0));
    if (!first.ok()) {
      (*summary)["agree"] = false;
      (*summary)["agreement_error"] = std::string(first.status().message());
      return;
    }
    double norm = 0, worst_relative = 0, worst_abs = 0;
    for (const CheckpointEntry& e : first->entries) {
      if (e.kind != TensorKind::kParameter) continue;
      for (size_t i = 0; i < e.tensor.data.size() / sizeof(float); ++i) {
        norm += static_cast<double>(e.tensor.floats()[i]) * e.tensor.floats()[i];
      }
    }
    norm = std::sqrt(norm);
    for (int r = 1; r < job_.cluster().workers(); ++r) {
      auto other = ReadCheckpoint(paths_.StreamReplicaModel(r));
      if (!other.ok()) {
        (*summary)["agree"] = false;
        (*summary)["agreement_error"] = std::string(other.status().message());
        return;
      }
      double diff = 0;
      for (const CheckpointEntry& e : first->entries) {
        if (e.kind != TensorKind::kParameter) continue;
        const CheckpointEntry* o = other->Find(TensorKind::kParameter, e.tensor.name());
        if (o == nullptr || o->tensor.data.size() != e.tensor.data.size()) {
          (*summary)["agree"] = false;
          (*summary)["agreement_error"] = absl::StrCat("replica ", r, " has no ", e.tensor.name());
          return;
        }
        for (size_t i = 0; i < e.tensor.data.size() / sizeof(float); ++i) {
          const double d = static_cast<double>(e.tensor.floats()[i]) - o->tensor.floats()[i];
          diff += d * d;
          worst_abs = std::max(worst_abs, std::abs(d));
        }
      }
      worst_relative = std::max(worst_relative, norm > 0 ? std::sqrt(diff) / norm : 0.0);
    }
    (*summary)["agreement_relative"] = worst_relative;
    (*summary)["agreement_max_abs"] = worst_abs;
    (*summary)["agree"] = worst_relative <= kAgreementTolerance;
  }

  void StopEverything() {
    StopPredictLoad();
    for (auto& replica : replicas_) {
      if (!replica->Poll()) {
        replica->Signal(SIGTERM);
        replica->WaitFor(std::chrono::seconds(10));
      }
    }
    if (producer_ && !producer_->Poll()) {
      producer_->Signal(SIGTERM);
      producer_->WaitFor(std::chrono::seconds(10));
    }
    // The servers last: a replica may still have been pulling from them.
    std::vector<ChildProcess*> servers;
    for (auto& server : servers_) servers.push_back(server.get());
    TerminateAll(servers, std::chrono::seconds(10));
    nlohmann::json ended = nlohmann::json::array();
    for (auto& replica : replicas_) {
      ended.push_back({{"process", replica->name()}, {"how", replica->ExitDescription()}});
    }
    for (auto& server : servers_) {
      ended.push_back({{"process", server->name()}, {"how", server->ExitDescription()}});
    }
    if (producer_) {
      // The producer of a stream with no end is stopped once the replicas are done.
      ended.push_back({{"process", producer_->name()}, {"how", producer_->ExitDescription()}});
    }
    record_->Event(RunEvent::kProcessesEnded, {{"processes", ended}});
  }

  double Seconds(StreamClock::time_point t) const {
    return std::chrono::duration<double>(t - started_).count();
  }

  void Say(const std::string& line) const {
    if (options_.quiet) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

 public:
  ~StreamRun() {
    broker_.reset();
    if (embedded_) embedded_->Stop();
    embedded_.reset();
    if (!broker_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(broker_dir_, ignored);
    }
  }

 private:
  const LocalRunOptions& options_;
  const v1::ResolvedJob job_;
  const RunPaths paths_;
  std::string nonce_;
  RunTls tls_;  // security.tls on or mutual
  std::unique_ptr<RunRecord> record_;
  std::unique_ptr<RunControlServer> control_;
  std::unique_ptr<StreamRunMetrics> run_metrics_;
  std::unique_ptr<PredictLoad> predict_load_;  // stream.predict_rate > 0, while the stream is read
  nlohmann::json predict_figures_;             // its figures once stopped
  BrokerAddress address_;
  std::string broker_dir_;
  std::unique_ptr<EmbeddedBroker> embedded_;
  std::unique_ptr<StreamBroker> broker_;
  std::unique_ptr<ChildProcess> producer_;
  std::vector<std::unique_ptr<ChildProcess>> replicas_;
  std::vector<SpawnOptions> replica_spawns_;  // how each was started, to start it again
  std::vector<int> replica_restarts_;
  int64_t mesh_recoveries_ = 0;  // declared on the broker, numbered from 1
  // stream.sync servers: the servers, where they serve, and what they said at the end.
  std::vector<std::unique_ptr<ChildProcess>> servers_;
  std::vector<std::string> server_addresses_;
  std::vector<nlohmann::json> server_figures_;
  StreamClock::time_point started_, launched_, trained_at_;
  StreamClock::time_point next_report_;
  std::map<int, size_t> drifts_recorded_;  // by replica: its detections in events.jsonl
  std::string failed_process_;             // the replica whose end failed the run
};

}  // namespace

int RunStreamJob(const LocalRunOptions& options, v1::ResolvedJob job, const std::string& run_dir) {
  return StreamRun(options, std::move(job), run_dir).Run();
}

}  // namespace strata
