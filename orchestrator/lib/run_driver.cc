#include "orchestrator/lib/run_driver.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "orchestrator/launch/attached_launcher.h"
#include "orchestrator/launch/local_launcher.h"
#include "orchestrator/launch/service_plan.h"
#include "orchestrator/run/grpc_cluster_client.h"
#include "services/common/base/files.h"
#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/process/interrupt.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/shard_index.h"
#include "services/common/wire/tls_certificates.h"
#include "strata/v1/evaluator.grpc.pb.h"

namespace strata {
namespace {

absl::Status CheckSignal(RunFailure& failure) {
  if (const int sig = Interrupted(); sig != 0) {
    return failure.Fail(
        "", absl::CancelledError(absl::StrCat(
                "interrupted by ", sig == SIGINT ? "SIGINT (Ctrl-C)" : ::strsignal(sig))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ServiceExit>> RunDriver::CheckProcesses() {
  STRATA_RETURN_IF_ERROR(CheckSignal(failure_));
  return launcher_->TakeExits();
}

bool RunDriver::TakeSwitchRequest() {
  // Both channels are drained, so that a request does not linger for a later step.
  const bool called = control_ && control_->TakeSwitchRequest();
  const bool dropped = FileExists(paths_.switch_request);
  if (dropped) std::remove(paths_.switch_request.c_str());
  return called || dropped;
}

void RunDriver::StartControlServer() {
  // `strata supervise` runs in a container: a socket there is out of reach of the commands on the
  // host, so it publishes none and they use the files (docs/architecture.md, "The control
  // channel").
  if (attached()) return;
  auto control = RunControlServer::Start(
      paths_.root, [this] { return RunInfoNow(); },
      [this](const v1::RunPredictRequest& request, v1::PredictReply* reply) {
        return PredictNow(request, reply);
      });
  if (!control.ok()) {
    console_.Say(absl::StrFormat("%s: no control socket (%s); `strata switch` falls back to %s",
                                 command(), control.status().message(), paths_.switch_request));
    return;
  }
  control_ = std::move(*control);
}

void RunDriver::StartRunMetrics() {
  // In a container (`strata supervise`) nothing restarts a service and the platform's own tools
  // watch the containers; the orchestrator's figures are those of the runs it launches itself.
  if (attached() || !job_.metrics().enabled()) return;
  MetricsEndpointOptions endpoint;
  // A free port where the services listen: loopback, or the head's address on emulated hosts.
  endpoint.listen = absl::StrCat(HeadListenHost(options_.hosts), ":0");
  endpoint.port_file = paths_.OrchestratorMetricsPortFile();
  // The run's clock in Unix time: a resumed run's start_ lies before this process began.
  const double run_start_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      SecondsBetween(start_, Clock::now());
  auto served = RunMetrics::Start(endpoint, run_start_unix);
  if (!served.ok()) {
    console_.Say(absl::StrFormat("%s: the orchestrator serves no metrics (%s); the run goes on",
                                 command(), served.status().message()));
    return;
  }
  run_metrics_ = std::move(*served);
}

grpc::Status RunDriver::PredictNow(const v1::RunPredictRequest& request,
                                   v1::PredictReply* reply) const {
  v1::EvaluatorPredictRequest forwarded;
  std::string evaluator;
  {
    std::lock_guard<std::mutex> lock(run_info_mu_);
    evaluator = evaluator_address_;
    *forwarded.mutable_source() = model_source_;
  }
  if (evaluator.empty() ||
      (forwarded.source().worker().empty() && forwarded.source().parameter_servers().empty())) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the run has no evaluator or no model to answer from yet");
  }
  *forwarded.mutable_request() = request.request();
  grpc::ClientContext context;
  // The evaluator fetches the model (seconds on a loaded machine) and may be scoring one first.
  context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
  return v1::Evaluator::NewStub(MakeChannel(evaluator))->Predict(&context, forwarded, reply);
}

v1::RunInfo RunDriver::RunInfoNow() const {
  std::lock_guard<std::mutex> lock(run_info_mu_);
  return run_info_;
}

int RunDriver::Run() {
  start_ = began_ = Clock::now();
  absl::Status s = Execute();
  console_.ClearProgress();
  if (!s.ok()) failure_.Fail("", s).IgnoreError();  // a failure already named stays
  const bool interrupted =
      Interrupted() != 0 || failure_.status().code() == absl::StatusCode::kCancelled;
  const std::string state = !failure_.failed() ? "succeeded"
                            : interrupted      ? "interrupted"
                                               : "failed";
  if (failure_.failed() && record_) {
    record_->RunFailed({state, std::string(failure_.status().message()), failure_.process()});
  }
  Shutdown(!failure_.failed());
  // The run's own keys are useless once its services are gone and are not left in a directory
  // that outlives the run (the CA's key was never written).
  RemoveGeneratedTls(tls_, command());
  Finish(state);
  control_.reset();  // status.json no longer names the socket
  if (failure_.failed()) {
    std::fprintf(stderr, "%s: %s: %s\n  run directory: %s (summary.json, logs/)\n", command(),
                 state.c_str(), std::string(failure_.status().message()).c_str(),
                 paths_.root.c_str());
    return interrupted ? 130 : 1;
  }
  const v1::EvalMetrics& final_metrics = eval_->final_metrics();
  std::printf("done: %s in %.1f s, final val_acc %.4f, val_loss %.4f%s; results in %s\n",
              job_.name().c_str(), SecondsBetween(start_, finish_), final_metrics.val_acc(),
              final_metrics.val_loss(),
              switched()
                  ? absl::StrFormat(", switched at epoch %.2f (handover %.3f s)",
                                    switcher_->outcome()->epoch, switcher_->outcome()->handover_s)
                        .c_str()
                  : "",
              paths_.root.c_str());
  std::fflush(stdout);
  return 0;
}

absl::Status RunDriver::Execute() {
  STRATA_RETURN_IF_ERROR(Prepare());
  console_.Say(
      absl::StrFormat("%s: %s: %s on %s, strategy %s, %d worker(s), %d parameter server(s); run "
                      "directory %s",
                      command(), job_.name(), ModelText(job_), Spelled(job_.dataset().name()),
                      StrategyText(job_.strategy()), job_.cluster().workers(),
                      UsesServers(job_) ? job_.cluster().parameter_servers() : 0, paths_.root));
  if (resume_) {
    console_.Say(
        resume_->phase == "ps"
            ? absl::StrFormat("resuming in push/pull from the servers' last saves (%s)",
                              switched_before_resume() ? "switched before" : "a ps job")
        : resume_->checkpoint.empty()
            ? std::string("resuming in all-reduce from the start: no ring checkpoint was saved")
            : absl::StrFormat("resuming in all-reduce at step %d from %s", resume_->step,
                              resume_->checkpoint));
  }
  STRATA_RETURN_IF_ERROR(ShardData());
  STRATA_RETURN_IF_ERROR(LaunchServices());
  STRATA_RETURN_IF_ERROR(WaitForPorts());
  STRATA_RETURN_IF_ERROR(StartTraining());
  return Supervise();
}

absl::Status RunDriver::Prepare() {
  for (const std::string& dir :
       {paths_.root, paths_.shards, paths_.checkpoints, paths_.logs, paths_.ports}) {
    STRATA_RETURN_IF_ERROR(MakeDirs(dir));
  }
  if (resume_) {
    PrepareResume();
  } else {
    STRATA_RETURN_IF_ERROR(KeepTheModel());
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(paths_.job_yaml, JobSpecYaml(job_)));
  }
  // Every service this run starts reads this file (a resumed run writes it again, from the spec
  // it resumes). In a container plan the platform's one-shot step wrote it, with the replica
  // counts the deployment has.
  if (!attached()) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(paths_.job_resolved, ResolvedJobText(job_)));
  }
  // A fresh secret per run, whatever this process's environment holds: the orchestrator's channels
  // carry it and ChildProcess hands it to every service in the child's environment only. Not a
  // file in the run directory: the directory outlives the run and is shared with readers of
  // logs and reports; /proc/PID/environ is readable only by the user who runs the job, the same
  // boundary a 0600 file would give, with nothing left behind.
  RpcAuth auth;
  if (attached()) {
    // The token the platform gave every service (a compose secret, a Kubernetes Secret); present,
    // SuperviseJob checked.
    auth.token = RunTokenFromEnvironment();
  } else {
    STRATA_ASSIGN_OR_RETURN(auth.token, GenerateRunToken());
  }
  if (TlsOn(job_)) {
    STRATA_ASSIGN_OR_RETURN(tls_, PrepareRunTls(job_, paths_.tls, attached()));
    auth.tls = tls_.client;
  }
  SetRpcAuth(std::move(auth));
  STRATA_ASSIGN_OR_RETURN(record_, RunRecord::Open(paths_.root, start_));
  if (attached()) {
    launcher_ = std::make_unique<AttachedLauncher>(*options_.attached, *record_);
  } else {
    launcher_ = std::make_unique<LocalLauncher>(options_.bin_dir, paths_.root, *record_, console_,
                                                failure_, options_.hosts);
  }
  nlohmann::json started = {{"name", job_.name()},
                            {"job", options_.job_path},
                            {"overrides", options_.overrides},
                            {"tls", Spelled(job_.security().tls())},
                            {"orchestrator_pid", ::getpid()}};
  if (resume_) {
    started["phase"] = resume_->phase;
    started["steps"] = resume_->StepsByRank(job_.cluster().workers());
    started["checkpoint"] = resume_->checkpoint;
    started["resume"] = resume_->earlier_resumes + 1;
    started["removed"] = resume_->stale_server_checkpoints;
  }
  record_->Event(resume_ ? RunEvent::kResumed : RunEvent::kRunStarted, std::move(started));
  InstallInterruptHandlers();
  StartControlServer();
  StartRunMetrics();
  WriteStatus();
  return absl::OkStatus();
}

// A user's TorchScript model is copied into the run directory, and the job names the copy: the
// run trains, resumes and exports the file it started with, whatever becomes of the original.
// Attached runs find the model where their platform mounted it.
absl::Status RunDriver::KeepTheModel() {
  if (attached() || job_.model().torchscript().empty()) return absl::OkStatus();
  const std::string copy = paths_.At(run_files::kModel);
  std::error_code ec;
  std::filesystem::copy_file(job_.model().torchscript(), copy,
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot copy model.torchscript ",
                                                      job_.model().torchscript(),
                                                      " into the run: ", ec.message()));
  }
  job_.mutable_model()->set_torchscript(
      std::filesystem::absolute(copy).lexically_normal().string());
  return absl::OkStatus();
}

// The certificates of a job with security.tls on or mutual: the job's own directory, or a CA and
// certificates made for this run alone in the run directory (docs/security.md, "Transport
// security"). This process is a client only: it loads the CA and, under mutual, the client pair.
absl::Status RunDriver::ShardData() {
  const auto t0 = Clock::now();
  // A resumed run trains on the shards it had; one killed while sharding has none (the sharder
  // publishes its plan whole, manifest included, or not at all), and shards now.
  const bool shard = !resume_ || !FileExists(paths_.ShardManifest());
  if (shard) {
    STRATA_RETURN_IF_ERROR(launcher_->RunTask(ShardTask(paths_), options_.startup_timeout,
                                              [this] { return CheckSignal(failure_); }));
  }
  int64_t smallest = -1;
  for (int r = 0; r < job_.cluster().workers(); ++r) {
    auto shard = ReadShardIndexFile(paths_.ShardIndex(r));
    if (!shard.ok()) return failure_.Fail("sharder", shard.status());
    const int64_t n = static_cast<int64_t>(shard->indices.size());
    shard_sizes_.push_back(n);
    train_examples_ = static_cast<int64_t>(shard->examples);
    smallest = smallest < 0 ? n : std::min(smallest, n);
  }
  view_.worker_batch = job_.training().worker_batch();
  view_.epochs = job_.training().epochs();
  // Ring steps must line up: every worker runs as many steps as the smallest shard allows.
  view_.planned_steps_per_epoch =
      std::max<int64_t>(1, (smallest + view_.worker_batch - 1) / view_.worker_batch);
  const double secs = SecondsBetween(t0, Clock::now());
  record_->Event(RunEvent::kShardsWritten, {{"seconds", secs},
                                            {"shard_sizes", shard_sizes_},
                                            {"train_examples", train_examples_},
                                            {"steps_per_epoch", view_.planned_steps_per_epoch},
                                            {"method", Spelled(job_.sharding().method())}});
  if (attached() || !shard) {  // the sharder ran before; its time is not ours to report
    console_.Say(absl::StrFormat(
        "the sharder's plan: %d training examples (%s) in %d shard(s); %d steps per epoch",
        train_examples_, Spelled(job_.sharding().method()), job_.cluster().workers(),
        view_.planned_steps_per_epoch));
  } else {
    console_.Say(absl::StrFormat(
        "sharded %d training examples (%s) into %d shard(s) in %.1f s; %d steps per epoch",
        train_examples_, Spelled(job_.sharding().method()), job_.cluster().workers(), secs,
        view_.planned_steps_per_epoch));
  }
  return absl::OkStatus();
}

absl::Status RunDriver::LaunchServices() {
  ServicePlanInputs inputs;
  if (job_.strategy().kind() == v1::STRATEGY_KIND_PS) {
    // Servers of a pure ps job start from the model a worker would build from the job's seed
    // (a resumed one from their own saves, if they made any: ps_main.cc's --resume).
    inputs.init_checkpoint = paths_.InitCheckpoint();
    if (!resume_ || !FileExists(inputs.init_checkpoint)) {
      STRATA_RETURN_IF_ERROR(launcher_->RunTask(InitCheckpointTask(paths_, inputs.init_checkpoint),
                                                options_.startup_timeout,
                                                [this] { return CheckSignal(failure_); }));
    }
  }
  // Abstract socket names vanish with the process and need no directory; the orchestrator's pid
  // and the run's name keep concurrent runs apart.
  inputs.tls_dir = tls_.dir;
  inputs.ring_socket_prefix =
      absl::StrCat("unix-abstract:strata-", getpid(), "-",
                   std::filesystem::path(paths_.root).filename().string(), "-worker-");
  for (const ServiceSpec& service : PlanServices(job_, paths_, inputs)) {
    STRATA_RETURN_IF_ERROR(launcher_->Start(service));
  }
  return absl::OkStatus();
}

absl::Status RunDriver::WaitForPorts() {
  STRATA_ASSIGN_OR_RETURN(endpoints_, launcher_->WaitReady(options_.startup_timeout, [this] {
    return CheckSignal(failure_);
  }));
  ClusterAddresses addresses;
  addresses.workers = Addresses(ServiceRole::kWorker);
  addresses.servers = Addresses(ServiceRole::kParameterServer);
  addresses.evaluator = Addresses(ServiceRole::kEvaluator).front();
  // Local processes: a dead evaluator is an exit the supervisor sees, so waiting is safe.
  addresses.wait_for_evaluator = !attached();
  client_ = MakeGrpcClusterClient(addresses);
  console_.Say(absl::StrFormat("%d %s after %.1f s", endpoints_.size(),
                               attached() ? "service(s) serving" : "process(es) listening",
                               SecondsBetween(began_, Clock::now())));
  return absl::OkStatus();
}

std::vector<std::string> RunDriver::Addresses(ServiceRole role) const {
  std::vector<std::string> out;
  for (const Endpoint& e : endpoints_) {
    if (e.role == role) out.push_back(e.address);
  }
  return out;
}

absl::Status RunDriver::StartTraining() {
  v1::StartRequest start;
  for (const Endpoint& e : endpoints_) {
    if (e.role == ServiceRole::kWorker)
      start.add_workers(e.ring_address.empty() ? e.address : e.ring_address);
  }
  for (const std::string& a : Addresses(ServiceRole::kParameterServer))
    start.add_parameter_servers(a);
  const bool push_pull =
      resume_ ? resume_->phase == "ps" : job_.strategy().kind() == v1::STRATEGY_KIND_PS;
  start.set_mode(push_pull ? v1::SYNC_MODE_PS : v1::SYNC_MODE_ALLREDUCE);
  start.set_ps_learning_rate(
      static_cast<float>(job_.training().lr() * job_.strategy().server_lr_scale()));
  start.set_steps_per_epoch(view_.planned_steps_per_epoch);
  start_request_ = start;
  const std::vector<int64_t> first_steps = resume_
                                               ? resume_->StepsByRank(client_->worker_count())
                                               : std::vector<int64_t>(client_->worker_count(), 0);
  for (int r = 0; r < client_->worker_count(); ++r) {
    v1::StartRequest mine = start;
    mine.set_first_step(first_steps[r]);
    if (resume_ && !push_pull && !resume_->checkpoint.empty()) {
      mine.set_init_checkpoint(run_files::kRingCheckpoint);  // relative to the run directory
    }
    absl::Status s = client_->StartWorker(r, mine, options_.rpc_timeout);
    if (!s.ok()) return failure_.Fail(absl::StrCat("worker-", r), s);
  }
  train_start_ = Clock::now();
  phase_.name = push_pull ? "ps" : "allreduce";
  if (switched_before_resume()) phase_.switched_at_step = resume_->switch_done->at_step;
  record_->Event(RunEvent::kTrainingStarted, {{"mode", phase_.name},
                                              {"steps_per_epoch", view_.planned_steps_per_epoch},
                                              {"worker_batch", view_.worker_batch}});
  return absl::OkStatus();
}

absl::Status RunDriver::Supervise() {
  const std::vector<std::string> server_addresses = Addresses(ServiceRole::kParameterServer);
  const std::vector<std::string> worker_addresses = Addresses(ServiceRole::kWorker);
  policy_ =
      std::make_unique<SwitchPolicy>(job_.strategy(), job_.training().epochs(), record_.get());
  if (job_.strategy().kind() == v1::STRATEGY_KIND_SWITCH && !switched_before_resume()) {
    SwitchControllerOptions o;
    o.server_addresses = server_addresses;
    o.checkpoint_dir = paths_.checkpoints;
    o.switch_timeout = options_.switch_timeout;
    o.run_start = start_;
    switcher_ = std::make_unique<SwitchController>(o, *client_, *this, failure_);
  }
  EvalSchedulerOptions e;
  e.epochs = job_.training().epochs();
  e.regression = job_.training().loss() == v1::LOSS_MSE;
  if (resume_) e.evaluated_epochs = resume_->evaluated_epochs;
  e.worker_address = worker_addresses.front();
  e.server_addresses = server_addresses;
  e.run_start = start_;
  e.on_result = [this](const v1::EvalMetrics& m) {
    const bool rule_open = switcher_ && !switcher_->settled();
    auto trigger = policy_->OnEvaluation(m.epoch(), m.phase(), m.val_loss(), rule_open);
    if (trigger) switcher_->Offer(std::move(*trigger));
  };
  eval_ = std::make_unique<EvalScheduler>(e, *client_, *record_, console_, phase_);
  // Only where this process runs the services itself: in containers nothing restarts a service
  // (compose `restart: "no"`, Kubernetes `backoffLimit: 0`), and a dead one fails the run.
  if (!attached() && job_.recovery().restarts() > 0) {
    RecoveryOptions r;
    r.max_restarts = job_.recovery().restarts();
    r.rejoin_timeout = options_.startup_timeout;
    r.rpc_timeout = options_.rpc_timeout;
    r.ps_start = start_request_;
    r.ps_start.set_mode(v1::SYNC_MODE_PS);
    r.ring_start = start_request_;
    r.ring_start.set_mode(v1::SYNC_MODE_ALLREDUCE);
    recovery_ = std::make_unique<ServiceRecovery>(r, *launcher_, *client_, *record_, failure_);
  }
  SupervisorOptions so;
  so.switch_job = job_.strategy().kind() == v1::STRATEGY_KIND_SWITCH;
  so.worker_addresses = worker_addresses;
  so.status_timeout = std::min(options_.rpc_timeout, std::chrono::milliseconds(5000));
  so.unresponsive_timeout = options_.unresponsive_timeout;
  RunSupervisor supervisor(so, {*client_, *record_, failure_, *this, view_, phase_, *eval_,
                                *policy_, switcher_.get(), recovery_.get()});
  absl::Status s = supervisor.Run();
  training_end_ = supervisor.training_end();
  return s;
}

// Stop through the RPC first (a clean exit), then signals for whatever is left.
void RunDriver::Shutdown(bool clean) {
  if (shut_down_ || !launcher_) return;
  shut_down_ = true;
  const std::chrono::milliseconds stop_deadline(clean ? 3000 : 1000);
  const std::string reason = clean ? "the run is done" : "the run is ending";
  if (client_) {
    for (int r = 0; r < client_->worker_count(); ++r) {
      if (launcher_->Running(absl::StrCat("worker-", r)))
        client_->StopWorker(r, reason, stop_deadline);
    }
    for (int p = 0; p < client_->server_count(); ++p) {
      if (launcher_->Running(absl::StrCat("ps-", p))) client_->StopServer(p, reason, stop_deadline);
    }
    if (launcher_->Running("evaluator")) client_->StopEvaluator(reason, stop_deadline);
  }
  launcher_->StopAll(clean ? std::chrono::seconds(10) : std::chrono::seconds(2));
  if (eval_) eval_->Cancel();  // its call ended with the evaluator
}

void RunDriver::SwitchDecided(const SwitchDecidedEvent& e) {
  record_->SwitchDecided(e);
  console_.Say(absl::StrFormat("switch decided (%s): %s; handing over at step %d",
                               TriggerKindName(e.trigger.kind), e.trigger.reason, e.at_step));
}

void RunDriver::SwitchFailed(const SwitchFailedEvent& e) {
  record_->SwitchFailed(e);
  if (e.verification) {
    handover_check_ = e.verification->ToJson();
    console_.Say(absl::StrFormat("handover check failed: %s", e.error));
  }
}

void RunDriver::SwitchDone(const SwitchDoneEvent& e) {
  handover_check_ = e.verification.ToJson();
  record_->SwitchDone(e);
  console_.Say(absl::StrFormat(
      "switched to parameter servers at step %d (epoch %.2f): handover %.3f s%s", e.at_step,
      e.epoch.value_or(0), e.handover_s.value_or(0),
      e.verification.weights_equal ? ", server weights equal the last all-reduce model" : ""));
}

// What the run left that would mislead its resumption: the port files of services that are gone
// (the launcher waits for new ones), a `strata switch` request the killed run never took, server
// saves of a handover that never completed (FindResumePoint names them) and the run's own
// certificates. The rest (record, logs, checkpoints) goes on.
void RunDriver::PrepareResume() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(paths_.ports, ec)) {
    std::filesystem::remove(entry.path(), ec);
  }
  std::remove(paths_.switch_request.c_str());
  for (const std::string& stale : resume_->stale_server_checkpoints) std::remove(stale.c_str());
  // A killed run could not remove its own certificates; their services are gone, and the resumed
  // run makes a new CA (PrepareRunTls), which refuses a directory that still holds the old one.
  if (TlsOn(job_) && job_.security().tls_dir().empty()) {
    std::filesystem::remove_all(paths_.tls, ec);
  }
  // The run's clock goes on from where it stopped, so that the record's wall_s never runs back;
  // the time the run lay dead is not counted.
  start_ -=
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(resume_->wall_s));
}

}  // namespace strata
