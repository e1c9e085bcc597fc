// strata-ps: one parameter-server partition (docs/protocol.md documents the command line). It
// links no LibTorch, so it starts in milliseconds; the orchestrator launches one per partition.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "services/common/base/files.h"
#include "services/common/base/logging.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"
#include "services/common/config/job_flags.h"
#include "services/common/metrics/metrics_endpoint.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/shard_index.h"
#include "services/common/wire/tls_flags.h"
#include "services/parameter_server/partition.h"
#include "services/parameter_server/pdp/coordinator_service.h"
#include "services/parameter_server/pdp/pull_coordinator.h"
#include "services/parameter_server/ps_metrics.h"
#include "services/parameter_server/service.h"

namespace {

// PDP/APDP: partition 0's server decides the rounds (pdp/pull_coordinator.h). The search's
// defaults are Strata's reading of the paper (docs/protocol.md, "Choosing K*"): at least one
// mini-batch per worker, at most a quarter of the training points, the first candidate a quarter
// of the probe window.
absl::StatusOr<std::unique_ptr<strata::PullCoordinator>> MakeCoordinator(
    const strata::v1::ResolvedJob& job, const strata::PartitionConfig& config,
    const std::string& run_dir) {
  strata::PullCoordinatorOptions o;
  o.mode = config.consistency;
  const int workers = config.workers;
  const int64_t train_examples = config.train_examples;
  o.workers = workers;
  o.sample_budget = config.sample_budget;
  const int64_t floor = job.strategy().round_points();
  const int64_t k_star = job.strategy().k_star();
  if (k_star > 0 && (k_star < workers || k_star > train_examples)) {
    return absl::InvalidArgumentError(absl::StrCat("strategy.k_star ", k_star, " must lie in [",
                                                   workers, ", ", train_examples,
                                                   "] (the workers, the training points)"));
  }
  o.fixed_k_star = k_star;
  o.search.floor = std::min(floor, train_examples);
  o.search.probe_points = std::max<int64_t>(
      1, static_cast<int64_t>(job.strategy().probe_ratio() * static_cast<double>(train_examples)));
  o.search.ceiling = std::max(o.search.floor, train_examples / 4);
  o.search.start = job.strategy().k_star_start() > 0
                       ? job.strategy().k_star_start()
                       : std::clamp(o.search.probe_points / 4, o.search.floor, o.search.ceiling);
  if (!run_dir.empty()) o.rounds_file = absl::StrCat(run_dir, "/", strata::run_files::kPdpRounds);
  return strata::PullCoordinator::Create(o);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "strata-ps: %s\n", message.c_str());
  return 2;
}

// Set by Stop, a signal or the parent's death; main() waits for it.
class StopFlag {
 public:
  void Set(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) reason_ = reason;
    stopped_ = true;
    cv_.notify_all();
  }
  // True once stopped; waits at most `d`.
  bool WaitFor(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, d, [&] { return stopped_; });
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::string reason_;
};

// The command line.
struct PsFlags {
  std::string listen = "127.0.0.1:0", port_file, init_checkpoint, run_dir, log_file;
  int partition = 0;
  int checkpoint_every_epochs = 0;
  // -1: what the job and the run directory say.
  int64_t train_examples = 0, sample_budget = -1;
  double checkpoint_every_s = -1;
  bool resume = false;
  bool insecure_no_auth = false;
  strata::TlsFlagValues tls;
  strata::MetricsEndpointOptions metrics;
};

void AddFlags(CLI::App& app, strata::JobFlags& job_flags, PsFlags* f) {
  app.add_option("--listen", f->listen, "address to serve on; port 0 picks a free port");
  app.add_option("--port-file", f->port_file,
                 "file that receives the bound port (written atomically)");
  app.add_option("--metrics-listen", f->metrics.listen,
                 "serve Prometheus metrics at http://ADDRESS/metrics (port 0 = pick a free one)");
  app.add_option("--metrics-port-file", f->metrics.port_file,
                 "file that receives the metrics port (written atomically)");
  app.add_option("--partition", f->partition, "this server's partition index")
      ->required()
      ->check(CLI::NonNegativeNumber);
  job_flags.AddShorthand("--partitions", "cluster.parameter_servers", "number of servers");
  job_flags.AddShorthand("--workers", "cluster.workers", "number of workers pushing");
  job_flags.AddShorthand("--consistency", "strategy.consistency", "asp | bsp | ssp | pdp | apdp");
  job_flags.AddShorthand("--staleness", "strategy.staleness", "SSP bound");
  job_flags.AddShorthand("--lr-scale", "strategy.ps_lr_scale",
                         "ASP/SSP per-worker lr = training.lr * X");
  app.add_option("--train-examples", f->train_examples,
                 "training-set size (global epoch = samples / M); default: the sharder's count in "
                 "<run-dir>/shards/manifest.json")
      ->check(CLI::PositiveNumber);
  app.add_option("--sample-budget", f->sample_budget,
                 "samples the job applies in all, all workers together; then pushes are discarded "
                 "and workers told to stop (default: training.epochs x the training-set size; "
                 "0: none, each worker stops by itself)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--init-checkpoint", f->init_checkpoint,
                 "load this checkpoint (whole model or partition) at start")
      ->check(CLI::ExistingFile);
  app.add_option("--run-dir", f->run_dir,
                 "run directory (checkpoints go to <run-dir>/checkpoints)");
  app.add_option("--checkpoint-every-epochs", f->checkpoint_every_epochs,
                 "save the partition each time E more global epochs complete (needs --run-dir)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-every-s", f->checkpoint_every_s,
                 "save the partition every S seconds (needs --run-dir; default with --run-dir: "
                 "the job's recovery.server_checkpoint_s)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-file", f->log_file, "also log to this file");
  app.add_flag("--resume", f->resume,
               "start from this partition's own last periodic checkpoint "
               "(<run-dir>/checkpoints/ps-<partition>.ckpt) when it exists, instead of "
               "--init-checkpoint: a restarted server continues where it last saved");
  app.add_flag(strata::kInsecureNoAuthFlag, f->insecure_no_auth, strata::kInsecureNoAuthHelp);
  strata::AddTlsFlags(&app, &f->tls);
}

// This server's partition of the job, with what the job learned while it ran: the sharder counted
// the training set (in the run directory) before any server started. Also settles the periodic
// checkpoints' default.
absl::StatusOr<strata::PartitionConfig> PartitionOf(const strata::v1::ResolvedJob& job,
                                                    PsFlags* f) {
  if (f->train_examples == 0) {
    if (f->run_dir.empty()) {
      return absl::InvalidArgumentError("give --train-examples, or --run-dir of a sharded run");
    }
    STRATA_ASSIGN_OR_RETURN(
        auto plan, strata::ReadShardPlanFacts(strata::RunPaths(f->run_dir).ShardManifest()));
    f->train_examples = plan.examples;
  }
  if (f->checkpoint_every_s < 0) {
    f->checkpoint_every_s = f->run_dir.empty() ? 0 : job.recovery().server_checkpoint_s();
  }
  STRATA_ASSIGN_OR_RETURN(strata::PartitionConfig config,
                          strata::PartitionConfigFor(job, f->partition, f->train_examples));
  if (f->sample_budget >= 0) config.sample_budget = f->sample_budget;
  return config;
}

// The per-step push/pull over plain TCP (tcp_push_pull_server.h), unless the job keeps it on gRPC
// or TLS is on (the data plane is not encrypted); the rest stays on gRPC. Null: none.
std::unique_ptr<strata::TcpPushPullServer> StartDataPlane(const strata::v1::ResolvedJob& job,
                                                          const std::string& listen,
                                                          strata::ParameterPartition* state) {
  if (job.strategy().ps_link() == strata::v1::DATA_LINK_GRPC) {
    spdlog::info("strategy.ps_link {}: no plain-TCP data plane",
                 strata::Spelled(job.strategy().ps_link()));
    return nullptr;
  }
  if (strata::ChannelsUseTls()) {
    spdlog::info("TLS is on: push/pull stays on gRPC (the plain-TCP data plane is not encrypted)");
    return nullptr;
  }
  strata::TcpPushPullServerOptions plane;
  plane.listen_host = strata::tcp::DataPlaneHost(listen);
  auto started = strata::TcpPushPullServer::Start(state, plane);
  if (!started.ok()) {
    spdlog::warn("no plain-TCP data plane ({}): push/pull stays on gRPC",
                 std::string(started.status().message()));
    return nullptr;
  }
  return std::move(*started);
}

// The model the server starts with: a restarted server's own save is newer than anything it was
// started with (--resume); else --init-checkpoint, if any (else it idles until LoadCheckpoint).
absl::Status LoadFirstModel(strata::ParameterServerService& service, const PsFlags& f) {
  const std::string own_checkpoint = service.DefaultCheckpointPath();
  const bool resuming = f.resume && ::access(own_checkpoint.c_str(), F_OK) == 0;
  const std::string first_model = resuming ? own_checkpoint : f.init_checkpoint;
  if (first_model.empty()) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(const strata::v1::CheckpointReply loaded, service.Load(first_model));
  if (resuming) {
    spdlog::info("resumed from this partition's last checkpoint {}: version {}", own_checkpoint,
                 loaded.version());
  }
  return absl::OkStatus();
}

// Periodic checkpoints, until the partition stops: woken by epoch boundaries (and every second,
// for the timer).
void SavePeriodically(strata::ParameterPartition& state, strata::ParameterServerService& service,
                      const PsFlags& f) {
  int64_t saved_version = -1, saved_epochs = state.Status().completed_epochs;
  auto last_save = std::chrono::steady_clock::now();
  const auto every = std::chrono::duration<double>(f.checkpoint_every_s);
  while (!state.stopping()) {
    const auto status = state.Status();
    state.WaitForProgress(status.completed_epochs, std::chrono::seconds(1));
    const auto now_status = state.Status();
    if (!now_status.loaded || now_status.version == saved_version) continue;
    const bool epochs_due = f.checkpoint_every_epochs > 0 &&
                            now_status.completed_epochs >= saved_epochs + f.checkpoint_every_epochs;
    const bool time_due =
        f.checkpoint_every_s > 0 && std::chrono::steady_clock::now() - last_save >= every;
    // The first model a server holds is saved at once: a server restarted before its first
    // timed save would otherwise come back empty (switch jobs) or at the initial model.
    const bool first_save = saved_version < 0;
    if (!epochs_due && !time_due && !first_save) continue;
    auto saved = service.Save("");
    last_save = std::chrono::steady_clock::now();
    if (!saved.ok()) {
      spdlog::warn("periodic checkpoint failed: {}", std::string(saved.status().message()));
      continue;
    }
    saved_version = saved->version();
    saved_epochs = now_status.completed_epochs;
    spdlog::info("checkpoint {} at version {}, epoch {}", saved->path(), saved->version(),
                 now_status.completed_epochs);
  }
}

// Exit with the orchestrator (or test) that launched us: the parent's death sends SIGTERM, which
// the signal thread turns into an orderly stop. Blocks the stop signals before any thread starts
// (all inherit the mask) and returns them; false if the parent is already gone.
bool FollowTheParent(sigset_t* signals) {
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return false;
  sigemptyset(signals);
  sigaddset(signals, SIGTERM);
  sigaddset(signals, SIGINT);
  sigaddset(signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, signals, nullptr);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t signals;
  if (!FollowTheParent(&signals)) return Fail("parent exited during start-up");

  CLI::App app{"Strata parameter server: one partition of the model"};
  PsFlags flags;
  strata::JobFlags job_flags(&app, "a server");
  AddFlags(app, job_flags, &flags);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = strata::InitServiceAuth("strata-ps", flags.insecure_no_auth); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (absl::Status s = strata::InitServiceTls(flags.tls); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if ((flags.checkpoint_every_s > 0 || flags.checkpoint_every_epochs > 0 || flags.resume) &&
      flags.run_dir.empty()) {
    return Fail("--checkpoint-every-s, --checkpoint-every-epochs and --resume need --run-dir");
  }
  strata::InitLogging({absl::StrCat("ps-", flags.partition), flags.log_file, "info"});

  auto job = strata::LoadServiceJob(job_flags.Source());
  if (!job.ok()) return Fail(std::string(job.status().message()));
  auto partition_config = PartitionOf(*job, &flags);
  if (!partition_config.ok()) return Fail(std::string(partition_config.status().message()));
  const strata::PartitionConfig& config = *partition_config;

  strata::ParameterPartition state(config);
  // Before the service's port file: a launcher that sees the server listening finds its metrics.
  auto metrics = strata::MetricsEndpoint::Start(flags.metrics);
  if (!metrics.ok()) return Fail(std::string(metrics.status().message()));
  (*metrics)->Serve(std::make_shared<strata::PartitionMetrics>(state, flags.partition));
  if ((*metrics)->port() > 0) spdlog::info("metrics on port {} (/metrics)", (*metrics)->port());
  std::unique_ptr<strata::TcpPushPullServer> data_plane =
      StartDataPlane(*job, flags.listen, &state);
  StopFlag stop;
  strata::ParameterServerServiceOptions service_options;
  service_options.data_plane = data_plane.get();
  service_options.run_dir = flags.run_dir;
  service_options.on_stop = [&stop](const std::string& reason) {
    stop.Set(reason.empty() ? "Stop RPC" : "Stop RPC: " + reason);
  };
  strata::ParameterServerService service(&state, service_options);
  std::unique_ptr<strata::PullCoordinator> coordinator;
  std::unique_ptr<strata::PullCoordinatorService> coordinator_service;
  if (strata::ServerDecidesPulls(config.consistency) && flags.partition == 0) {
    auto made = MakeCoordinator(*job, config, flags.run_dir);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    coordinator = std::move(*made);
    coordinator_service = std::make_unique<strata::PullCoordinatorService>(coordinator.get());
  }
  if (absl::Status s = LoadFirstModel(service, flags); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  int port = 0;
  std::vector<grpc::Service*> services = {&service};
  if (coordinator_service) services.push_back(coordinator_service.get());
  std::unique_ptr<grpc::Server> server = strata::StartServer(flags.listen, services, &port);
  if (server == nullptr || port == 0) return Fail(absl::StrCat("cannot listen on ", flags.listen));
  if (!flags.port_file.empty()) {
    if (absl::Status s = strata::WriteFileAtomic(flags.port_file, absl::StrCat(port, "\n"));
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  spdlog::info(
      "partition {} of {} serving on port {} (push/pull data plane: {}): {} workers, {} "
      "(staleness {}), lr {} x {}, {} training examples{}",
      flags.partition, config.partitions, port,
      data_plane ? absl::StrCat("TCP port ", data_plane->port()) : std::string("gRPC"),
      config.workers, strata::Spelled(config.consistency), config.staleness, config.lr,
      config.lr_scale, flags.train_examples, state.loaded() ? "" : "; idle until LoadCheckpoint");
  if (coordinator) {
    spdlog::info("deciding the rounds of the {} workers: {}", config.workers,
                 coordinator->SearchText());
    coordinator->Start();
  }

  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    stop.Set(absl::StrCat("signal ", signal));
  });
  signal_thread.detach();  // stays blocked in sigwait when Stop ends the process instead
  std::thread saver;
  if (flags.checkpoint_every_s > 0 || flags.checkpoint_every_epochs > 0) {
    saver = std::thread([&] { SavePeriodically(state, service, flags); });
  }
  while (!stop.WaitFor(std::chrono::hours(24))) {
  }
  spdlog::info("stopping: {}", stop.reason());
  if (coordinator) coordinator->Stop();  // ends the workers' notice streams
  state.Shutdown();  // releases waiting pulls and BSP rounds with UNAVAILABLE, and the saver
  if (data_plane) data_plane->Stop();
  if (saver.joinable()) saver.join();
  // Waiting calls were released above; with a client connection still open, gRPC 1.51's sync
  // server sits out the whole deadline, so keep it short.
  server->Shutdown(strata::DeadlineAfter(std::chrono::milliseconds(500)));
  server->Wait();
  spdlog::info("stopped");
  return 0;
}
