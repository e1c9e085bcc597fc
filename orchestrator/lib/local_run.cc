#include "orchestrator/lib/local_run.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/strip.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "orchestrator/lib/cpu_limit.h"
#include "orchestrator/lib/job_checks.h"
#include "orchestrator/lib/report.h"
#include "orchestrator/lib/run_paths.h"
#include "orchestrator/lib/switch_rule.h"
#include "services/common/checkpoint.h"
#include "services/common/child_process.h"
#include "services/common/files.h"
#include "services/common/metrics.h"
#include "services/common/progress.h"
#include "services/common/rpc.h"
#include "services/common/shard_index.h"
#include "services/common/status.h"
#include "services/common/tensor_codec.h"
#include "strata/v1/evaluator.grpc.pb.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// How long a worker's error waits for a peer's exit to show before the worker is blamed.
constexpr std::chrono::milliseconds kPeerExitGrace{2000};
using nlohmann::json;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm;
  ::localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const int total = static_cast<int>(s + 0.5);
  if (total >= 60) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%ds", total);
}

// A run-level failure: what went wrong and, if known, which process it was.
struct Failure {
  std::string process;
  absl::Status status;
};

struct Service {
  std::string name;  // worker-0, ps-1, evaluator
  std::string port_file;
  std::string address;       // 127.0.0.1:port once known
  std::string ring_address;  // workers: where the other workers reach its ring all-reduce
  std::unique_ptr<ChildProcess> process;
};

// An evaluation running on its own thread so that watching the workers never waits for it.
struct PendingEval {
  int64_t epoch = 0;
  std::string phase;
  std::thread thread;
  std::atomic<bool> done{false};
  absl::StatusOr<v1::EvalMetrics> result = absl::UnknownError("not run");
};

class LocalRun {
 public:
  LocalRun(const LocalRunOptions& options, CheckedJob job, std::string run_dir)
      : options_(options),
        job_(std::move(job)),
        spec_(job_.spec),
        paths_(std::move(run_dir)),
        progress_(!options.quiet) {}

  int Run() {
    start_ = Clock::now();
    absl::Status s = Execute();
    progress_.Clear();
    if (!s.ok() && failure_.status.ok()) failure_.status = s;
    const bool interrupted =
        g_signal != 0 || failure_.status.code() == absl::StatusCode::kCancelled;
    std::string state = failure_.status.ok() ? "succeeded" : interrupted ? "interrupted" : "failed";
    if (!failure_.status.ok()) {
      Event("run_failed",
            {{"state", state},
             {"error", std::string(failure_.status.message())},
             {"process", failure_.process.empty() ? json(nullptr) : json(failure_.process)}});
    }
    Shutdown(failure_.status.ok());
    finish_ = Clock::now();
    state_ = state;
    WriteStatus();
    WriteSummary(state);
    if (absl::Status r = WriteRunReport(paths_.root); !r.ok()) {
      std::fprintf(stderr, "strata run: cannot write the report: %s\n",
                   std::string(r.message()).c_str());
    }
    Event("run_finished", {{"state", state}, {"wall_s", SecondsBetween(start_, finish_)}});
    if (!failure_.status.ok()) {
      std::fprintf(stderr, "strata run: %s: %s\n  run directory: %s (summary.json, logs/)\n",
                   state.c_str(), std::string(failure_.status.message()).c_str(),
                   paths_.root.c_str());
      return interrupted ? 130 : 1;
    }
    std::printf("done: %s in %.1f s, final val_acc %.4f, val_loss %.4f%s; results in %s\n",
                spec_.name.c_str(), SecondsBetween(start_, finish_), final_.val_acc(),
                final_.val_loss(),
                switch_done_ ? absl::StrFormat(", switched at epoch %.2f (handover %.3f s)",
                                               switch_epoch_, handover_s_)
                                   .c_str()
                             : "",
                paths_.root.c_str());
    std::fflush(stdout);
    return 0;
  }

 private:
  // ---- the stages -------------------------------------------------------------------------

  absl::Status Execute() {
    STRATA_RETURN_IF_ERROR(Prepare());
    Say(absl::StrFormat(
        "strata run: %s: %s on %s, strategy %s, %d worker(s), %d parameter server(s); run "
        "directory %s",
        spec_.name, spec_.model.arch, spec_.dataset.name, StrategyText(), spec_.cluster.workers,
        UsesServers() ? spec_.cluster.parameter_servers : 0, paths_.root));
    STRATA_RETURN_IF_ERROR(ShardData());
    STRATA_RETURN_IF_ERROR(LaunchServices());
    STRATA_RETURN_IF_ERROR(WaitForPorts());
    STRATA_RETURN_IF_ERROR(StartTraining());
    STRATA_RETURN_IF_ERROR(Watch());
    return FinalEvaluation();
  }

  absl::Status Prepare() {
    for (const std::string& dir :
         {paths_.root, paths_.shards, paths_.checkpoints, paths_.logs, paths_.ports}) {
      STRATA_RETURN_IF_ERROR(MakeDirs(dir));
    }
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(paths_.job_yaml, JobSpecToYaml(spec_)));
    auto events = JsonLinesWriter::Open(paths_.events);
    if (!events.ok()) return events.status();
    events_ = std::move(*events);
    auto metrics = JsonLinesWriter::Open(paths_.metrics);
    if (!metrics.ok()) return metrics.status();
    metrics_ = std::move(*metrics);
    Event("run_started", {{"name", spec_.name},
                          {"job", options_.job_path},
                          {"overrides", options_.overrides},
                          {"orchestrator_pid", ::getpid()}});
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns early
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    WriteStatus();
    return absl::OkStatus();
  }

  absl::Status ShardData() {
    const auto t0 = Clock::now();
    Service sharder;
    sharder.name = "sharder";
    STRATA_ASSIGN_OR_RETURN(sharder.process,
                            Spawn("sharder", {Bin("strata-sharder"), "--config", paths_.job_yaml,
                                              "--out", paths_.shards}));
    Event("launched", {{"process", "sharder"}, {"pid", sharder.process->pid()}});
    while (!sharder.process->Poll()) {
      STRATA_RETURN_IF_ERROR(CheckSignal());
      if (Clock::now() - t0 > options_.startup_timeout) {
        return Fail("sharder",
                    absl::DeadlineExceededError(absl::StrCat(
                        "the sharder did not finish within ",
                        options_.startup_timeout.count() / 1000, " s; see logs/sharder.log")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // waiting on a pid
    }
    if (!sharder.process->succeeded()) {
      return Fail("sharder", absl::InternalError(
                                 absl::StrCat("the sharder ", sharder.process->ExitDescription(),
                                              "; see logs/sharder.log: ", LastLogLine(sharder))));
    }
    int64_t smallest = -1;
    for (int r = 0; r < spec_.cluster.workers; ++r) {
      auto shard = ReadShardIndexFile(ShardFile(r));
      if (!shard.ok()) return Fail("sharder", shard.status());
      const int64_t n = static_cast<int64_t>(shard->indices.size());
      shard_sizes_.push_back(n);
      train_examples_ = static_cast<int64_t>(shard->examples);
      smallest = smallest < 0 ? n : std::min(smallest, n);
    }
    worker_batch_ = std::max(1, spec_.training.batch_size / spec_.cluster.workers);
    // Ring steps must line up: every worker runs as many steps as the smallest shard allows.
    steps_per_epoch_ = std::max<int64_t>(1, (smallest + worker_batch_ - 1) / worker_batch_);
    const double secs = SecondsBetween(t0, Clock::now());
    Event("shards_written", {{"seconds", secs},
                             {"shard_sizes", shard_sizes_},
                             {"train_examples", train_examples_},
                             {"steps_per_epoch", steps_per_epoch_},
                             {"method", spec_.sharding.method}});
    Say(absl::StrFormat(
        "sharded %d training examples (%s) into %d shard(s) in %.1f s; %d steps per epoch",
        train_examples_, spec_.sharding.method, spec_.cluster.workers, secs, steps_per_epoch_));
    return absl::OkStatus();
  }

  absl::Status LaunchServices() {
    std::string init_checkpoint;
    if (spec_.strategy.kind == "ps") {
      // Servers of a pure ps job start from the model a worker would build from the job's seed.
      init_checkpoint = paths_.checkpoints + "/init.ckpt";
      STRATA_ASSIGN_OR_RETURN(
          auto writer,
          Spawn("init-checkpoint", {Bin("strata-evaluator"), "--config", paths_.job_yaml,
                                    "--write-init-checkpoint", init_checkpoint}));
      if (!writer->WaitFor(options_.startup_timeout) || !writer->succeeded()) {
        return Fail("init-checkpoint", absl::InternalError(absl::StrCat(
                                           "writing the initial model ", writer->ExitDescription(),
                                           "; see logs/init-checkpoint.log")));
      }
    }
    if (UsesServers()) {
      for (int p = 0; p < spec_.cluster.parameter_servers; ++p) {
        Service s = NewService(absl::StrCat("ps-", p));
        std::vector<std::string> argv = ServiceArgv(
            "strata-ps", s,
            {"--partition", std::to_string(p), "--partitions",
             std::to_string(spec_.cluster.parameter_servers), "--workers",
             std::to_string(spec_.cluster.workers), "--config", paths_.job_yaml, "--consistency",
             spec_.strategy.consistency, "--staleness", std::to_string(spec_.strategy.staleness),
             "--train-examples", std::to_string(train_examples_), "--run-dir", paths_.root});
        if (spec_.strategy.ps_lr_scale > 0) {
          argv.insert(argv.end(), {"--lr-scale", absl::StrCat(spec_.strategy.ps_lr_scale)});
        }
        if (!init_checkpoint.empty())
          argv.insert(argv.end(), {"--init-checkpoint", init_checkpoint});
        STRATA_RETURN_IF_ERROR(LaunchService(s, argv));
        servers_.push_back(std::move(s));
      }
    }
    for (int r = 0; r < spec_.cluster.workers; ++r) {
      Service s = NewService(absl::StrCat("worker-", r));
      std::vector<std::string> argv =
          ServiceArgv("strata-worker", s,
                      {"--config", paths_.job_yaml, "--rank", std::to_string(r), "--world",
                       std::to_string(spec_.cluster.workers), "--shard-file", ShardFile(r),
                       "--run-dir", paths_.root});
      if (spec_.launcher.ring_transport == "unix") {
        // Abstract names vanish with the process and need no directory; the orchestrator's pid
        // and the run's name keep concurrent runs apart.
        s.ring_address =
            absl::StrCat("unix-abstract:strata-", getpid(), "-",
                         std::filesystem::path(paths_.root).filename().string(), "-worker-", r);
        argv.insert(argv.end(), {"--ring-listen", s.ring_address});
      }
      STRATA_RETURN_IF_ERROR(LaunchService(s, argv));
      for (const StragglerSpec& st : spec_.cluster.stragglers) {
        if (st.worker == r) SlowDown(s, st.cpu_fraction);
      }
      workers_.push_back(std::move(s));
    }
    evaluator_ = NewService("evaluator");
    return LaunchService(evaluator_, ServiceArgv("strata-evaluator", evaluator_,
                                                 {"--config", paths_.job_yaml, "--threads", "1"}));
  }

  absl::Status WaitForPorts() {
    const auto until = Clock::now() + options_.startup_timeout;
    for (;;) {
      STRATA_RETURN_IF_ERROR(CheckSignal());
      STRATA_RETURN_IF_ERROR(CheckChildren());
      bool all = true;
      for (Service* s : AllServices()) {
        if (!s->address.empty()) continue;
        auto text = ReadFile(s->port_file);
        int port = 0;
        if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
          s->address = absl::StrCat("127.0.0.1:", port);
          Event("listening", {{"process", s->name}, {"address", s->address}});
        } else {
          all = false;
        }
      }
      if (all) break;
      if (Clock::now() > until) {
        std::vector<std::string> missing;
        for (Service* s : AllServices()) {
          if (s->address.empty()) missing.push_back(s->name);
        }
        return Fail(missing.front(),
                    absl::DeadlineExceededError(absl::StrCat(
                        absl::StrJoin(missing, ", "), " did not start listening within ",
                        options_.startup_timeout.count() / 1000, " s; see logs/")));
      }
      std::this_thread::sleep_for(
          std::chrono::milliseconds(50));  // port files appear when they appear
    }
    for (Service& w : workers_)
      worker_stubs_.push_back(v1::Worker::NewStub(MakeChannel(w.address)));
    for (Service& s : servers_)
      server_stubs_.push_back(v1::ParameterServer::NewStub(MakeChannel(s.address)));
    evaluator_stub_ = v1::Evaluator::NewStub(MakeChannel(evaluator_.address));
    statuses_.resize(workers_.size());
    last_answer_.assign(workers_.size(), Clock::now());
    loss_by_epoch_.resize(workers_.size());
    Say(absl::StrFormat("%d process(es) listening after %.1f s", AllServices().size(),
                        SecondsBetween(start_, Clock::now())));
    return absl::OkStatus();
  }

  absl::Status StartTraining() {
    v1::StartRequest start;
    for (const Service& w : workers_)
      start.add_workers(w.ring_address.empty() ? w.address : w.ring_address);
    for (const Service& s : servers_) start.add_parameter_servers(s.address);
    start.set_mode(spec_.strategy.kind == "ps" ? v1::SYNC_MODE_PS : v1::SYNC_MODE_ALLREDUCE);
    const double scale =
        spec_.strategy.ps_lr_scale > 0 ? spec_.strategy.ps_lr_scale : 1.0 / spec_.cluster.workers;
    start.set_ps_learning_rate(static_cast<float>(spec_.training.lr * scale));
    start.set_steps_per_epoch(steps_per_epoch_);
    for (size_t r = 0; r < workers_.size(); ++r) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(options_.rpc_timeout));
      v1::StartReply reply;
      absl::Status s =
          FromGrpcStatus(worker_stubs_[r]->Start(&context, start, &reply),
                         absl::StrCat("Start of worker ", r, " at ", workers_[r].address));
      if (!s.ok()) return Fail(workers_[r].name, s);
    }
    train_start_ = Clock::now();
    phase_ = spec_.strategy.kind == "ps" ? "ps" : "allreduce";
    Event(
        "training_started",
        {{"mode", phase_}, {"steps_per_epoch", steps_per_epoch_}, {"worker_batch", worker_batch_}});
    return absl::OkStatus();
  }

  // Watches until every worker has finished its epochs.
  absl::Status Watch() {
    auto last_status_write = Clock::now();
    for (;;) {
      STRATA_RETURN_IF_ERROR(CheckSignal());
      STRATA_RETURN_IF_ERROR(CheckChildren());
      STRATA_RETURN_IF_ERROR(PollWorkers());
      STRATA_RETURN_IF_ERROR(CollectEvaluation());
      MaybeStartEvaluation();
      STRATA_RETURN_IF_ERROR(MaybeSwitch());
      UpdateProgressLine();
      if (Clock::now() - last_status_write > std::chrono::seconds(1)) {
        WriteStatus();
        last_status_write = Clock::now();
      }
      if (AllFinished()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the polling period
    }
    training_end_ = Clock::now();
    Event("training_finished", {{"steps", TotalSteps()}});
    return absl::OkStatus();
  }

  absl::Status FinalEvaluation() {
    STRATA_RETURN_IF_ERROR(WaitForEvaluation());
    if (last_evaluated_epoch_ < spec_.training.epochs || !have_final_) {
      StartEvaluation(spec_.training.epochs);
      STRATA_RETURN_IF_ERROR(WaitForEvaluation());
    }
    if (!have_final_) {
      return Fail("evaluator",
                  absl::InternalError("the final evaluation failed; see logs/evaluator.log"));
    }
    return absl::OkStatus();
  }

  // ---- watching ---------------------------------------------------------------------------

  absl::Status PollWorkers() {
    for (size_t r = 0; r < workers_.size(); ++r) {
      grpc::ClientContext context;
      context.set_deadline(
          DeadlineAfter(std::min(options_.rpc_timeout, std::chrono::milliseconds(5000))));
      v1::WorkerStatus status;
      grpc::Status s = worker_stubs_[r]->GetStatus(&context, v1::WorkerStatusRequest(), &status);
      if (!s.ok()) {
        if (Clock::now() - last_answer_[r] > options_.unresponsive_timeout) {
          return Fail(
              workers_[r].name,
              absl::UnavailableError(absl::StrCat(
                  "worker ", r, " at ", workers_[r].address, " has not answered for ",
                  options_.unresponsive_timeout.count() / 1000, " s: ", s.error_message())));
        }
        continue;
      }
      last_answer_[r] = Clock::now();
      statuses_[r] = status;
      if (!status.error().empty()) {
        // Often the error reports a peer that died (the ring broke): then the dead process is the
        // cause to name. A killed process's sockets close before its exit can be collected, so
        // give the exit a moment to show before blaming the worker that reported it.
        const auto until = Clock::now() + kPeerExitGrace;
        while (Clock::now() < until) {
          if (absl::Status exited = CheckChildren(); !exited.ok()) return exited;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // waitpid has no timeout
        }
        return Fail(workers_[r].name,
                    absl::AbortedError(absl::StrCat("worker ", r, " stopped: ", status.error())));
      }
      if (status.steps_per_epoch() > 0 && status.step() > 0) {
        const int64_t epoch =
            (status.step() + status.steps_per_epoch() - 1) / status.steps_per_epoch();
        loss_by_epoch_[r][epoch] = status.train_loss();
      }
    }
    return absl::OkStatus();
  }

  int64_t StepsPerEpoch() const {
    for (const auto& s : statuses_) {
      if (s.steps_per_epoch() > 0) return s.steps_per_epoch();
    }
    return steps_per_epoch_;
  }
  int64_t TotalSteps() const {
    int64_t total = 0;
    for (const auto& s : statuses_) total += s.step();
    return total;
  }
  // Global epochs: all workers' steps over one epoch's worth of steps of the whole cluster. In
  // all-reduce every worker has the same step; after the switch fast workers count for more.
  int64_t GlobalEpoch() const {
    const int64_t per_epoch = StepsPerEpoch() * static_cast<int64_t>(workers_.size());
    if (per_epoch <= 0) return 0;
    return std::min<int64_t>(TotalSteps() / per_epoch, spec_.training.epochs);
  }
  double GlobalEpochFraction() const {
    const int64_t per_epoch = StepsPerEpoch() * static_cast<int64_t>(workers_.size());
    return per_epoch > 0 ? static_cast<double>(TotalSteps()) / per_epoch : 0;
  }
  bool AllFinished() const {
    for (const auto& s : statuses_) {
      if (!s.finished()) return false;
    }
    return !statuses_.empty();
  }
  double SamplesPerSecond() const {
    double sum = 0;
    for (const auto& s : statuses_) sum += s.samples_per_s();
    return sum;
  }
  double TrainLossOf(int64_t epoch) const {
    double sum = 0;
    int n = 0;
    for (const auto& by_epoch : loss_by_epoch_) {
      if (auto it = by_epoch.find(epoch); it != by_epoch.end()) sum += it->second, ++n;
    }
    return n > 0 ? sum / n : std::nan("");
  }

  void MaybeStartEvaluation() {
    if (eval_) return;
    const int64_t epoch = GlobalEpoch();
    if (epoch > last_evaluated_epoch_ && epoch < spec_.training.epochs) StartEvaluation(epoch);
  }

  void StartEvaluation(int64_t epoch) {
    auto eval = std::make_unique<PendingEval>();
    // The phase is the one the evaluated epoch was trained in; the model is where it lives now.
    std::string phase = phase_;
    if (switch_done_ && epoch * StepsPerEpoch() <= switch_step_) phase = "allreduce";
    eval->epoch = epoch;
    eval->phase = phase;
    v1::EvaluateModelRequest request;
    request.set_epoch(epoch);
    request.set_phase(phase);
    if (phase_ == "ps") {
      for (const Service& s : servers_) request.add_parameter_servers(s.address);
    } else {
      request.set_worker(workers_[0].address);
    }
    request.set_train_loss(TrainLossOf(epoch));
    request.set_wall_s(SecondsBetween(start_, Clock::now()));
    last_evaluated_epoch_ = epoch;
    PendingEval* raw = eval.get();
    v1::Evaluator::Stub* stub = evaluator_stub_.get();
    raw->thread = std::thread([raw, stub, request] {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(std::chrono::minutes(10)));
      v1::EvalMetrics metrics;
      grpc::Status s = stub->Evaluate(&context, request, &metrics);
      if (s.ok()) {
        raw->result = metrics;
      } else {
        raw->result = FromGrpcStatus(s, absl::StrCat("evaluation of epoch ", request.epoch()));
      }
      raw->done.store(true);
    });
    eval_ = std::move(eval);
  }

  absl::Status WaitForEvaluation() {
    while (eval_) {
      STRATA_RETURN_IF_ERROR(CheckSignal());
      STRATA_RETURN_IF_ERROR(CheckChildren());
      STRATA_RETURN_IF_ERROR(CollectEvaluation());
      if (eval_)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // evaluation in flight
    }
    return absl::OkStatus();
  }

  absl::Status CollectEvaluation() {
    if (!eval_ || !eval_->done.load()) return absl::OkStatus();
    eval_->thread.join();
    std::unique_ptr<PendingEval> eval = std::move(eval_);
    if (!eval->result.ok()) {
      Event("evaluation_failed",
            {{"epoch", eval->epoch}, {"error", std::string(eval->result.status().message())}});
      Say(absl::StrCat("evaluation of epoch ", eval->epoch,
                       " failed: ", eval->result.status().message()));
      return absl::OkStatus();
    }
    const v1::EvalMetrics& m = *eval->result;
    json line = {
        {"epoch", m.epoch()},
        {"phase", m.phase()},
        {"val_loss", m.val_loss()},
        {"val_acc", m.val_acc()},
        {"train_loss", std::isfinite(m.train_loss()) ? json(m.train_loss()) : json(nullptr)},
        {"wall_s", m.wall_s()},
        {"samples_per_s", SamplesPerSecond()},
        {"eval_s", m.eval_s()},
        {"source", m.source()}};
    STRATA_RETURN_IF_ERROR(metrics_->Write(line));
    final_ = m;
    have_final_ = m.epoch() >= spec_.training.epochs;
    last_metrics_ = m;
    Say(absl::StrFormat(
        "epoch %3d/%d  %-9s  val_loss %.4f  val_acc %.4f  train_loss %s  %6.0f samples/s  %6.1f s",
        m.epoch(), spec_.training.epochs, m.phase(), m.val_loss(), m.val_acc(),
        std::isfinite(m.train_loss()) ? absl::StrFormat("%.4f", m.train_loss()) : "--",
        SamplesPerSecond(), m.wall_s()));
    if (m.phase() == "allreduce") {
      allreduce_losses_.push_back(m.val_loss());
      if (spec_.strategy.kind == "switch" && spec_.strategy.rule == "empirical" && !switch_done_ &&
          !switch_given_up_) {
        EmpiricalSwitchRule rule({spec_.strategy.window, spec_.strategy.threshold_percent});
        SwitchDecision d = rule.Decide(allreduce_losses_);
        Event("switch_rule", {{"epoch", m.epoch()},
                              {"s_percent", d.s_percent ? json(*d.s_percent) : json(nullptr)},
                              {"fire", d.fire}});
        if (d.fire) {
          pending_trigger_ = json{{"trigger", "empirical"},
                                  {"epoch", m.epoch()},
                                  {"s_percent", *d.s_percent},
                                  {"threshold_percent", spec_.strategy.threshold_percent},
                                  {"window", spec_.strategy.window},
                                  {"val_losses", allreduce_losses_},
                                  {"reason", d.reason}};
        }
      }
    }
    return absl::OkStatus();
  }

  // ---- the switch (DESIGN.md §3) -----------------------------------------------------------

  absl::Status MaybeSwitch() {
    if (FileExists(paths_.switch_request)) {
      std::remove(paths_.switch_request.c_str());
      if (spec_.strategy.kind != "switch") {
        Event("switch_request_ignored",
              {{"reason", "strategy.kind is not switch: no parameter servers run"}});
      } else if (switch_done_ || switch_given_up_) {
        Event("switch_request_ignored", {{"reason", "the run has already switched"}});
      } else {
        pending_trigger_ =
            json{{"trigger", "manual"}, {"epoch", GlobalEpoch()}, {"reason", "strata switch"}};
      }
    }
    if (spec_.strategy.kind != "switch" || switch_done_ || switch_given_up_)
      return absl::OkStatus();
    if (pending_trigger_.is_null() && spec_.strategy.rule == "at_fraction") {
      // The rule's step is known in advance: decide a little before it, so that the handover
      // happens exactly at the epoch boundary (all-reduce workers share one step counter).
      AtFractionSwitchRule rule(spec_.strategy.at_fraction, spec_.training.epochs);
      const int64_t target = rule.SwitchEpoch() * StepsPerEpoch();
      const int64_t lead = SwitchMargin() + static_cast<int64_t>(std::ceil(0.3 / StepSeconds()));
      if (MaxStep() + lead >= target) {
        SwitchDecision d = rule.Decide(rule.SwitchEpoch());
        pending_trigger_ = json{{"trigger", "at_fraction"},
                                {"epoch", GlobalEpoch()},
                                {"at_fraction", spec_.strategy.at_fraction},
                                {"switch_epoch", rule.SwitchEpoch()},
                                {"target_step", target},
                                {"reason", d.reason}};
      }
    }
    if (pending_trigger_.is_null()) return absl::OkStatus();
    json trigger = std::move(pending_trigger_);
    pending_trigger_ = nullptr;
    return Switch(trigger);
  }

  int64_t MaxStep() const {
    int64_t max_step = 0;
    for (const auto& s : statuses_) max_step = std::max(max_step, s.step());
    return max_step;
  }
  // Seconds per step of the slowest worker (0.1 before anyone reported a rate).
  double StepSeconds() const {
    double slowest = 0;
    for (const auto& s : statuses_) {
      if (s.samples_per_s() > 0)
        slowest = slowest == 0 ? s.samples_per_s() : std::min(slowest, s.samples_per_s());
    }
    return slowest > 0 ? worker_batch_ / slowest : 0.1;
  }
  // Steps ahead of the fastest worker for the switch step, so that every worker holds the
  // request before it gets there and the switch lands on the chosen step (for at_fraction, the
  // epoch boundary). A request that arrives late only delays the switch: the ring votes on the
  // step. A loopback RPC takes milliseconds; half a second of steps (at least 3) covers a loaded
  // machine. The workers keep training meanwhile, so the margin is not part of the handover.
  int64_t SwitchMargin() const {
    return std::max<int64_t>(3, static_cast<int64_t>(std::ceil(0.5 / StepSeconds())));
  }

  absl::Status Switch(json decided) {
    const int64_t max_step = MaxStep();
    int64_t at_step = max_step + SwitchMargin();
    if (decided.contains("target_step"))
      at_step = std::max(at_step, decided["target_step"].get<int64_t>());
    const int64_t last_step = StepsPerEpoch() * spec_.training.epochs;
    decided["at_step"] = at_step;
    decided["wall_s"] = SecondsBetween(start_, Clock::now());
    Event("switch_decided", decided);
    Say(absl::StrFormat("switch decided (%s): %s; handing over at step %d",
                        decided.value("trigger", ""), decided.value("reason", ""), at_step));
    if (at_step >= last_step) {
      switch_given_up_ = true;
      Event("switch_skipped", {{"reason", "training ends before the switch step"},
                               {"at_step", at_step},
                               {"last_step", last_step}});
      return absl::OkStatus();
    }
    const auto decided_at = Clock::now();

    // 1. The workers finish the agreed step (`at_step` unless a request came late); worker 0
    //    writes the model; all wait for the servers.
    struct SwitchCall {
      std::thread thread;
      std::atomic<bool> done{false};
      absl::StatusOr<v1::SwitchReply> reply = absl::UnknownError("not sent");
    };
    std::vector<std::unique_ptr<SwitchCall>> calls;
    v1::SwitchRequest request;
    request.set_mode(v1::SYNC_MODE_PS);
    for (const Service& s : servers_) request.add_parameter_servers(s.address);
    request.set_at_step(at_step);
    const auto switch_deadline = options_.switch_timeout;
    for (size_t r = 0; r < workers_.size(); ++r) {
      auto call = std::make_unique<SwitchCall>();
      SwitchCall* raw = call.get();
      v1::Worker::Stub* stub = worker_stubs_[r].get();
      const std::string what = absl::StrCat("Switch of worker ", r, " at ", workers_[r].address);
      raw->thread = std::thread([raw, stub, request, what, switch_deadline] {
        grpc::ClientContext context;
        context.set_deadline(DeadlineAfter(switch_deadline));
        v1::SwitchReply reply;
        grpc::Status s = stub->Switch(&context, request, &reply);
        if (s.ok()) {
          raw->reply = reply;
        } else {
          raw->reply = FromGrpcStatus(s, what);
        }
        raw->done.store(true);
      });
      calls.push_back(std::move(call));
    }
    auto join_all = [&] {
      for (auto& c : calls) {
        if (c->thread.joinable()) c->thread.join();
      }
    };
    auto switch_failure = [&]() -> std::optional<Failure> {
      for (size_t r = 0; r < calls.size(); ++r) {
        if (calls[r]->done.load() && !calls[r]->reply.ok()) {
          return Failure{workers_[r].name, Annotate(calls[r]->reply.status(), "switch")};
        }
      }
      return std::nullopt;
    };
    // Ends the run if the switch cannot complete; the threads end with the workers' shutdown.
    auto abandon = [&](Failure f) -> absl::Status {
      Event("switch_failed", {{"error", std::string(f.status.message())}, {"process", f.process}});
      absl::Status s = Fail(f.process, f.status);
      Shutdown(false);
      join_all();
      return s;
    };

    // The workers agree on the step themselves (at_step or the first boundary after it at which
    // all hold the request); worker 0 publishes it the moment the switch begins.
    int64_t switch_step = 0;
    std::string checkpoint;
    std::optional<Clock::time_point> paused, written;
    auto last_poll = Clock::now() - std::chrono::seconds(1);
    auto last_tick = Clock::now();
    while (!written) {
      if (absl::Status s = CheckSignal(); !s.ok()) return abandon({"", s});
      if (absl::Status s = CheckChildren(); !s.ok()) return abandon({failure_.process, s});
      if (auto f = switch_failure()) return abandon(*f);
      // Until the workers reach the switch step they train on: keep watching and evaluating.
      if (!paused && Clock::now() - last_tick > std::chrono::milliseconds(100)) {
        last_tick = Clock::now();
        if (absl::Status s = PollWorkers(); !s.ok()) return abandon({failure_.process, s});
        if (absl::Status s = CollectEvaluation(); !s.ok()) return abandon({"", s});
        MaybeStartEvaluation();
        UpdateProgressLine();
        WriteStatus();
      }
      // Worker 0's status tells when the pause began (it writes the checkpoint right after); a
      // loopback GetStatus costs well under a millisecond, so poll it often near the step.
      if (!paused && Clock::now() - last_poll > std::chrono::milliseconds(2)) {
        last_poll = Clock::now();
        grpc::ClientContext context;
        context.set_deadline(DeadlineAfter(std::chrono::seconds(2)));
        v1::WorkerStatus status;
        if (worker_stubs_[0]->GetStatus(&context, v1::WorkerStatusRequest(), &status).ok() &&
            status.switch_began_at_step() > 0) {
          paused = Clock::now();
          switch_step = status.switch_began_at_step();
          checkpoint = absl::StrCat(paths_.checkpoints, "/switch-step", switch_step, ".ckpt");
        }
      }
      if (paused && FileExists(checkpoint)) {
        written = Clock::now();
        break;
      }
      if (Clock::now() - decided_at > switch_deadline) {
        return abandon({workers_[0].name,
                        absl::DeadlineExceededError(absl::StrCat(
                            "worker 0 did not write its switch checkpoint (requested at step ",
                            at_step, ") within ", switch_deadline.count() / 1000, " s"))});
      }
      std::this_thread::sleep_for(
          std::chrono::milliseconds(2));  // a file appears; nothing to wait on
    }

    // 2. Every parameter server loads its partition of that checkpoint.
    const auto load_start = Clock::now();
    std::vector<int64_t> loaded_versions(servers_.size(), 0);
    {
      std::vector<std::thread> loads;
      std::vector<absl::Status> results(servers_.size());
      for (size_t p = 0; p < servers_.size(); ++p) {
        loads.emplace_back([&, p] {
          grpc::ClientContext context;
          context.set_deadline(DeadlineAfter(std::chrono::seconds(120)));
          v1::CheckpointRequest load;
          load.set_path(checkpoint);
          v1::CheckpointReply reply;
          results[p] = FromGrpcStatus(
              server_stubs_[p]->LoadCheckpoint(&context, load, &reply),
              absl::StrCat("LoadCheckpoint on parameter server ", p, " at ", servers_[p].address));
          loaded_versions[p] = reply.version();
        });
      }
      for (auto& t : loads) t.join();
      for (size_t p = 0; p < servers_.size(); ++p) {
        if (!results[p].ok()) return abandon({servers_[p].name, results[p]});
      }
    }
    const auto loaded = Clock::now();

    // The check the handover must pass: the servers now hold exactly the last all-reduce model.
    // Done before any worker could have pushed (they are still computing their first step) and
    // confirmed by the version; its time is not part of the handover.
    json verification = VerifyServersHold(checkpoint, loaded_versions);
    const auto verified = Clock::now();

    // 3. The workers pull and continue with push/pull; their Switch calls answer.
    while (true) {
      bool all = true;
      for (auto& c : calls) all = all && c->done.load();
      if (all) break;
      if (absl::Status s = CheckSignal(); !s.ok()) return abandon({"", s});
      if (absl::Status s = CheckChildren(); !s.ok()) return abandon({failure_.process, s});
      if (auto f = switch_failure()) return abandon(*f);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // replies arrive on their threads
    }
    const auto done = Clock::now();
    join_all();
    if (auto f = switch_failure()) return abandon(*f);
    // A fast model's first push can reach a server before the check above has read it back
    // (`raced_with_a_push`); the servers' copy then says nothing. The workers' own comparison
    // cannot race: each compares what it pulled with its last all-reduce weights, and none pushes
    // before all have pulled (they meet at a ring barrier in between).
    double workers_max_abs_diff = 0;
    for (auto& c : calls) {
      workers_max_abs_diff = std::max(workers_max_abs_diff, c->reply->handover_max_abs_diff());
    }
    verification["workers_max_abs_diff"] = workers_max_abs_diff;
    if (verification.value("raced_with_a_push", false)) {
      verification["weights_equal"] = workers_max_abs_diff == 0.0;
      verification["checked_by"] = "workers";
    } else {
      verification["checked_by"] = "servers";
    }

    switch_done_ = true;
    phase_ = "ps";
    switch_step_ = switch_step;
    switch_epoch_ = static_cast<double>(switch_step) / StepsPerEpoch();
    handover_s_ = SecondsBetween(*paused, done) - SecondsBetween(loaded, verified);
    switch_paused_ = *paused;
    switch_resumed_ = done;
    Event("switch_done", {{"at_step", switch_step},
                          {"requested_at_step", at_step},
                          {"epoch", switch_epoch_},
                          {"handover_s", handover_s_},
                          {"checkpoint", checkpoint},
                          {"checkpoint_s", SecondsBetween(*paused, *written)},
                          {"load_s", SecondsBetween(load_start, loaded)},
                          {"resume_s", SecondsBetween(verified, done)},
                          {"wall_s", SecondsBetween(start_, done)},
                          {"verification", verification}});
    Say(absl::StrFormat("switched to parameter servers at step %d (epoch %.2f): handover %.3f s%s",
                        switch_step, switch_epoch_, handover_s_,
                        verification.value("weights_equal", false)
                            ? ", server weights equal the last all-reduce model"
                            : ""));
    return absl::OkStatus();
  }

  json VerifyServersHold(const std::string& checkpoint_path, const std::vector<int64_t>& versions) {
    auto checkpoint = ReadCheckpoint(checkpoint_path);
    if (!checkpoint.ok())
      return {{"weights_equal", false}, {"error", std::string(checkpoint.status().message())}};
    int64_t compared = 0, differing = 0;
    bool raced = false;
    for (size_t p = 0; p < servers_.size(); ++p) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
      v1::PullRequest pull;
      pull.set_worker(-1);  // an observer: never waits on consistency rules
      auto reader = server_stubs_[p]->Pull(&context, pull);
      std::vector<v1::TensorChunk> chunks;
      v1::PullResponse response;
      while (reader->Read(&response)) {
        if (response.has_header() && response.header().version() != versions[p]) raced = true;
        if (response.has_chunk()) chunks.push_back(response.chunk());
      }
      if (grpc::Status s = reader->Finish(); !s.ok()) {
        return {{"weights_equal", false}, {"error", s.error_message()}};
      }
      auto tensors = DecodeAll(chunks);
      if (!tensors.ok())
        return {{"weights_equal", false}, {"error", std::string(tensors.status().message())}};
      for (const NamedTensor& t : *tensors) {
        const CheckpointEntry* e = checkpoint->Find(TensorKind::kParameter, t.name());
        if (e == nullptr) e = checkpoint->Find(TensorKind::kBuffer, t.name());
        ++compared;
        if (e == nullptr || e->tensor.data != t.data) ++differing;
      }
    }
    return {{"weights_equal", compared > 0 && differing == 0 && !raced},
            {"tensors_compared", compared},
            {"tensors_differing", differing},
            {"raced_with_a_push", raced}};
  }

  // ---- processes --------------------------------------------------------------------------

  Service NewService(const std::string& name) {
    Service s;
    s.name = name;
    s.port_file = absl::StrCat(paths_.ports, "/", name, ".port");
    return s;
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& name,
                                                      std::vector<std::string> argv) {
    SpawnOptions o;
    o.name = name;
    o.argv = std::move(argv);
    o.log_path = absl::StrCat(paths_.logs, "/", name, ".log");
    auto child = ChildProcess::Spawn(o);
    if (!child.ok()) return Fail(name, child.status());
    return child;
  }

  absl::Status LaunchService(Service& s, std::vector<std::string> argv) {
    const std::string command = absl::StrJoin(argv, " ");
    STRATA_ASSIGN_OR_RETURN(s.process, Spawn(s.name, std::move(argv)));
    Event("launched", {{"process", s.name}, {"pid", s.process->pid()}, {"command", command}});
    return absl::OkStatus();
  }

  // cluster.stragglers: a real slow-down where cgroups allow it, otherwise said plainly.
  void SlowDown(const Service& s, double fraction) {
    auto limit = CpuLimit::Apply(s.process->pid(), fraction,
                                 absl::StrCat("strata-", ::getpid(), "-", s.name));
    if (limit.ok()) {
      Event("straggler",
            {{"process", s.name}, {"cpu_fraction", fraction}, {"cgroup", (*limit)->path()}});
      Say(absl::StrFormat("%s runs as a straggler: %.0f%% of one core", s.name, fraction * 100));
      cpu_limits_.push_back(std::move(*limit));
    } else {
      Event("straggler_not_applied", {{"process", s.name},
                                      {"cpu_fraction", fraction},
                                      {"reason", std::string(limit.status().message())}});
      Say(absl::StrCat("warning: cannot slow down ", s.name, ": ", limit.status().message()));
    }
  }

  std::vector<Service*> AllServices() {
    std::vector<Service*> all;
    for (Service& s : servers_) all.push_back(&s);
    for (Service& s : workers_) all.push_back(&s);
    if (evaluator_.process) all.push_back(&evaluator_);
    return all;
  }

  // Any service that exits while the run needs it fails the run, named.
  absl::Status CheckChildren() {
    for (Service* s : AllServices()) {
      if (s->process && s->process->Poll()) {
        Event("process_exited", {{"process", s->name},
                                 {"pid", s->process->pid()},
                                 {"how", s->process->ExitDescription()}});
        return Fail(s->name,
                    absl::AbortedError(absl::StrCat(
                        s->name, " (pid ", s->process->pid(), ") ", s->process->ExitDescription(),
                        " during the run; see logs/", s->name, ".log", LastLogLineSuffix(*s))));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckSignal() {
    if (const int sig = g_signal.load(); sig != 0) {
      return Fail("",
                  absl::CancelledError(absl::StrCat(
                      "interrupted by ", sig == SIGINT ? "SIGINT (Ctrl-C)" : ::strsignal(sig))));
    }
    return absl::OkStatus();
  }

  absl::Status Fail(const std::string& process, absl::Status status) {
    if (failure_.status.ok()) failure_ = {process, status};
    return status;
  }

  // Stop through the RPC first (a clean exit), then signals for whatever is left.
  void Shutdown(bool clean) {
    if (shut_down_) return;
    shut_down_ = true;
    const auto stop_deadline =
        clean ? std::chrono::milliseconds(3000) : std::chrono::milliseconds(1000);
    v1::StopRequest stop;
    stop.set_reason(clean ? "the run is done" : "the run is ending");
    for (size_t r = 0; r < worker_stubs_.size(); ++r) {
      if (workers_[r].process->Poll()) continue;
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(stop_deadline));
      v1::StopReply reply;
      worker_stubs_[r]->Stop(&context, stop, &reply);
    }
    for (size_t p = 0; p < server_stubs_.size(); ++p) {
      if (servers_[p].process->Poll()) continue;
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(stop_deadline));
      v1::StopReply reply;
      server_stubs_[p]->Stop(&context, stop, &reply);
    }
    if (evaluator_stub_ && !evaluator_.process->Poll()) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(stop_deadline));
      v1::StopReply reply;
      evaluator_stub_->Stop(&context, stop, &reply);
    }
    std::vector<ChildProcess*> children;
    for (Service* s : AllServices()) {
      if (s->process) children.push_back(s->process.get());
    }
    // Give Stop its chance (services flush logs and checkpoints), then signals.
    const auto until = Clock::now() + (clean ? std::chrono::seconds(10) : std::chrono::seconds(2));
    for (ChildProcess* c : children) {
      c->WaitFor(
          std::max(std::chrono::milliseconds(0),
                   std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())));
    }
    TerminateAll(children, std::chrono::seconds(3));
    if (eval_ && eval_->thread.joinable())
      eval_->thread.join();  // its RPC ended with the evaluator
    eval_.reset();
    json exits = json::array();
    for (Service* s : AllServices()) {
      if (s->process)
        exits.push_back({{"process", s->name},
                         {"pid", s->process->pid()},
                         {"how", s->process->ExitDescription()}});
    }
    Event("processes_ended", {{"processes", exits}});
    cpu_limits_.clear();  // the cgroups are empty now
  }

  // ---- output -----------------------------------------------------------------------------

  void Event(const std::string& name, json fields) {
    if (!events_) return;
    fields["event"] = name;
    fields["time"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (!fields.contains("wall_s")) fields["wall_s"] = SecondsBetween(start_, Clock::now());
    events_->Write(fields).IgnoreError();  // the run goes on without its diary
  }

  void Say(const std::string& line) {
    if (options_.quiet) return;
    progress_.Clear();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  void UpdateProgressLine() {
    if (!progress_.live()) return;
    const double f = GlobalEpochFraction() / spec_.training.epochs;
    const double elapsed = SecondsBetween(train_start_, Clock::now());
    const double eta = f > 0.01 ? elapsed * (1 - f) / f : NAN;
    std::string metrics = last_metrics_
                              ? absl::StrFormat("val_loss %.4f val_acc %.4f",
                                                last_metrics_->val_loss(), last_metrics_->val_acc())
                              : "val --";
    progress_.Update(absl::StrFormat("epoch %.2f/%d %s %-9s %s  %5.0f samples/s  ETA %s",
                                     GlobalEpochFraction(), spec_.training.epochs, Bar(f, 20),
                                     phase_, metrics, SamplesPerSecond(), Duration(eta)));
  }

  void WriteStatus() {
    json processes = json::array();
    for (Service* s : AllServices()) {
      processes.push_back({{"name", s->name},
                           {"pid", s->process ? s->process->pid() : 0},
                           {"address", s->address},
                           {"running", s->process && !s->process->exited()}});
    }
    json workers = json::array();
    for (size_t r = 0; r < statuses_.size(); ++r) {
      const auto& s = statuses_[r];
      workers.push_back({{"rank", r},
                         {"epoch", s.epoch()},
                         {"step", s.step()},
                         {"finished", s.finished()},
                         {"mode", s.mode() == v1::SYNC_MODE_PS ? "ps" : "allreduce"},
                         {"samples_per_s", s.samples_per_s()},
                         {"train_loss", s.train_loss()}});
    }
    json status = {
        {"state", state_},
        {"name", spec_.name},
        {"orchestrator_pid", ::getpid()},
        {"strategy", StrategyText()},
        {"phase", phase_},
        {"epoch", GlobalEpochFraction()},
        {"epochs", spec_.training.epochs},
        {"samples_per_s", SamplesPerSecond()},
        {"switched", switch_done_},
        {"last_val_loss", last_metrics_ ? json(last_metrics_->val_loss()) : json(nullptr)},
        {"last_val_acc", last_metrics_ ? json(last_metrics_->val_acc()) : json(nullptr)},
        {"wall_s", SecondsBetween(start_, Clock::now())},
        {"updated", static_cast<double>(std::time(nullptr))},
        {"processes", processes},
        {"workers", workers}};
    WriteFileAtomic(paths_.status, status.dump(2) + "\n").IgnoreError();
  }

  void WriteSummary(const std::string& state) {
    const double wall = SecondsBetween(start_, finish_);
    json throughput = json::object();
    const double samples_per_step = worker_batch_;
    const auto end = training_end_.value_or(finish_);
    if (train_start_ != Clock::time_point{}) {
      if (switch_done_) {
        const int64_t before = switch_step_ * static_cast<int64_t>(workers_.size());
        throughput["allreduce"] = before * samples_per_step /
                                  std::max(1e-9, SecondsBetween(train_start_, switch_paused_));
        throughput["ps"] = (TotalSteps() - before) * samples_per_step /
                           std::max(1e-9, SecondsBetween(switch_resumed_, end));
      } else {
        throughput[phase_] =
            TotalSteps() * samples_per_step / std::max(1e-9, SecondsBetween(train_start_, end));
      }
    }
    json processes = json::array();
    for (Service* s : AllServices()) {
      if (s->process)
        processes.push_back({{"name", s->name},
                             {"pid", s->process->pid()},
                             {"exit", s->process->ExitDescription()}});
    }
    json summary = {
        {"name", spec_.name},
        {"state", state},
        {"error",
         failure_.status.ok() ? json(nullptr) : json(std::string(failure_.status.message()))},
        {"failed_process", failure_.process.empty() ? json(nullptr) : json(failure_.process)},
        {"strategy", StrategyText()},
        {"arch", spec_.model.arch},
        {"dataset", spec_.dataset.name},
        {"workers", spec_.cluster.workers},
        {"parameter_servers", UsesServers() ? spec_.cluster.parameter_servers : 0},
        {"epochs", last_metrics_ ? json(last_metrics_->epoch()) : json(0)},
        {"epochs_planned", spec_.training.epochs},
        {"final_val_acc", have_final_ ? json(final_.val_acc()) : json(nullptr)},
        {"final_val_loss", have_final_ ? json(final_.val_loss()) : json(nullptr)},
        {"last_val_acc", last_metrics_ ? json(last_metrics_->val_acc()) : json(nullptr)},
        {"wall_s", wall},
        {"training_s", train_start_ != Clock::time_point{} ? json(SecondsBetween(train_start_, end))
                                                           : json(nullptr)},
        {"switch_epoch", switch_done_ ? json(switch_epoch_) : json(nullptr)},
        {"switch_step", switch_done_ ? json(switch_step_) : json(nullptr)},
        {"switch_handover_s", switch_done_ ? json(handover_s_) : json(nullptr)},
        {"samples_per_s", throughput},
        {"processes", processes},
    };
    WriteFileAtomic(paths_.summary, summary.dump(2) + "\n").IgnoreError();
  }

  // ---- small helpers ----------------------------------------------------------------------

  bool UsesServers() const { return spec_.strategy.kind != "allreduce"; }
  std::string Bin(const std::string& name) const {
    return absl::StrCat(options_.bin_dir, "/", name);
  }
  // A service's command line: it listens on a free loopback port and writes the port into its
  // port file, then takes `more`.
  std::vector<std::string> ServiceArgv(const std::string& binary, const Service& s,
                                       std::initializer_list<std::string> more) const {
    std::vector<std::string> argv = {Bin(binary), "--listen", "127.0.0.1:0", "--port-file",
                                     s.port_file};
    argv.insert(argv.end(), more);
    return argv;
  }
  std::string ShardFile(int rank) const {
    return absl::StrCat(paths_.shards, "/shard-", rank, ".idx");
  }
  std::string StrategyText() const {
    const StrategySpec& s = spec_.strategy;
    if (s.kind == "ps") return absl::StrCat("ps (", s.consistency, ")");
    if (s.kind == "switch") {
      return s.rule == "at_fraction" ? absl::StrCat("switch (at_fraction ", s.at_fraction, ")")
                                     : absl::StrCat("switch (empirical, window ", s.window,
                                                    ", threshold ", s.threshold_percent, "%)");
    }
    return s.kind;
  }
  std::string LastLogLine(const Service& s) const {
    auto text = ReadFile(s.process ? s.process->log_path() : "");
    if (!text.ok()) return "";
    std::string t(absl::StripTrailingAsciiWhitespace(*text));
    const size_t nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
  }
  std::string LastLogLineSuffix(const Service& s) const {
    std::string line = LastLogLine(s);
    return line.empty() ? "" : absl::StrCat(" (last line: ", line, ")");
  }

  const LocalRunOptions& options_;
  CheckedJob job_;
  const JobSpec& spec_;
  RunPaths paths_;
  ProgressLine progress_;
  std::unique_ptr<JsonLinesWriter> events_, metrics_;

  Clock::time_point start_, train_start_, finish_, switch_paused_, switch_resumed_;
  std::optional<Clock::time_point> training_end_;
  std::vector<int64_t> shard_sizes_;
  int64_t train_examples_ = 0, steps_per_epoch_ = 0;
  int worker_batch_ = 1;

  std::vector<Service> servers_, workers_;
  Service evaluator_;
  std::vector<std::unique_ptr<CpuLimit>> cpu_limits_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> worker_stubs_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> server_stubs_;
  std::unique_ptr<v1::Evaluator::Stub> evaluator_stub_;
  std::vector<v1::WorkerStatus> statuses_;
  std::vector<Clock::time_point> last_answer_;
  std::vector<std::map<int64_t, double>> loss_by_epoch_;

  std::string phase_ = "starting";
  std::string state_ = "running";
  std::unique_ptr<PendingEval> eval_;
  int64_t last_evaluated_epoch_ = 0;
  std::optional<v1::EvalMetrics> last_metrics_;
  v1::EvalMetrics final_;
  bool have_final_ = false;
  std::vector<double> allreduce_losses_;

  json pending_trigger_;
  bool switch_done_ = false, switch_given_up_ = false;
  int64_t switch_step_ = 0;
  double switch_epoch_ = 0, handover_s_ = 0;

  Failure failure_{"", absl::OkStatus()};
  bool shut_down_ = false;
};

}  // namespace

std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

int RunLocalJob(const LocalRunOptions& options) {
  JobCheckOptions check;
  check.overrides = options.overrides;
  check.for_run = true;
  auto job = LoadAndCheckJob(options.job_path, check);
  if (!job.ok()) {
    std::fprintf(stderr, "strata run: %s is not a valid job spec; nothing was launched:\n%s\n",
                 options.job_path.c_str(), std::string(job.status().message()).c_str());
    return 2;
  }
  const JobSpec& spec = job->spec;
  std::vector<std::string> needed = {"strata-sharder", "strata-worker", "strata-evaluator"};
  if (spec.strategy.kind != "allreduce") needed.push_back("strata-ps");
  for (const std::string& bin : needed) {
    const std::string path = absl::StrCat(options.bin_dir, "/", bin);
    if (::access(path.c_str(), X_OK) != 0) {
      std::fprintf(stderr,
                   "strata run: %s is missing (build it: cmake --build build --target %s); nothing "
                   "was launched\n",
                   path.c_str(), bin.c_str());
      return 2;
    }
  }
  std::string dir = options.out_dir.empty() ? absl::StrCat("runs/", spec.name, "-", Timestamp())
                                            : options.out_dir;
  if (FileExists(dir + "/job.yaml")) {
    std::fprintf(stderr, "strata run: %s already holds a run; choose another --out\n", dir.c_str());
    return 2;
  }
  LocalRun run(options, std::move(*job), dir);
  return run.Run();
}

}  // namespace strata
