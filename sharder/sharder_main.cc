// strata-sharder: builds shard plans (docs/sharding.md).
//   strata-sharder [JOB.yaml | --config JOB.yaml] [--dataset ... --workers N ...] --out DIR
//       one plan, then exit (0 on success; 1 with a message naming the problem, nothing at DIR)
//   strata-sharder serve --listen 127.0.0.1:0 --port-file F [--log-file F]
//       the Sharder gRPC service, until Stop, SIGTERM or the parent's death
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "services/common/base/files.h"
#include "services/common/base/logging.h"
#include "services/common/config/job_keys.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/tls_flags.h"
#include "sharder/shard_flags.h"
#include "sharder/shard_job.h"
#include "sharder/sharder_service.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "strata-sharder: %s\n", message.c_str());
  return 1;
}

// LibTorch's OpenMP threads spin while they wait. On a shared machine whose cores are busy with
// other processes, spinning threads starve the ones doing the work: measured on 2 loaded cores,
// a 784x784 eigendecomposition took 21 s with 2 spinning threads and 0.05 s with passive
// waiting. libgomp reads OMP_WAIT_POLICY once, when it is loaded, so the only way to set it for
// this process is in its environment: set it and re-execute ourselves once. `strata shard`
// sets it for its child, which then skips this step.
void EnsurePassiveOpenMpWaiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // If re-executing fails we run on, only slower on a busy machine.
}

int RunOnce(const strata::shard::ShardFlags& flags) {
  auto job = strata::sharder::ResolveShardJob(flags);
  if (!job.ok()) return Fail(std::string(job.status().message()));
  auto manifest = strata::sharder::RunShardJob(*job);
  if (!manifest.ok()) return Fail(std::string(manifest.status().message()));
  const auto& m = *manifest;
  std::printf("strata-sharder: %s plan of %lld %s examples over %d workers written to %s\n",
              m["method"].get<std::string>().c_str(),
              static_cast<long long>(m["examples"].get<int64_t>()),
              strata::Spelled(job->dataset.name).c_str(), job->plan.workers, job->out_dir.c_str());
  std::string phases;
  for (const auto& [phase, seconds] : m["seconds"].items()) {
    absl::StrAppend(&phases, phases.empty() ? "" : ", ", phase, " ", seconds.get<double>(), " s");
  }
  std::printf("  seconds: %s\n", phases.c_str());
  if (m.contains("kmeans")) {
    int broadcast = 0;
    for (const auto& c : m["clusters"]) broadcast += c["broadcast"].get<bool>() ? 1 : 0;
    std::printf("  kmeans: %d iterations%s, %zu clusters (%d sparse, given to every worker)\n",
                m["kmeans"]["iterations"].get<int>(),
                m["kmeans"]["converged"].get<bool>() ? " (converged)" : "", m["clusters"].size(),
                broadcast);
  }
  return 0;
}

int Serve(const std::string& listen, const std::string& port_file, const std::string& log_file,
          const std::string& run_dir) {
  // Exit with the process that started us (orchestrator, test) instead of lingering.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // SIGTERM/SIGINT are taken by a thread of ours (sigwait) so that shutdown is orderly.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  strata::LoggingOptions logging;
  logging.service = "sharder";
  logging.log_file = log_file;
  strata::InitLogging(logging);
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  auto request_stop = [&] {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
    cv.notify_all();
  };
  strata::sharder::SharderService service(request_stop, run_dir);
  int port = 0;
  std::unique_ptr<grpc::Server> server = strata::StartServer(listen, {&service}, &port);
  if (server == nullptr || port <= 0) return Fail(absl::StrCat("cannot listen on ", listen));
  if (!port_file.empty()) {
    if (absl::Status s = strata::WriteFileAtomic(port_file, absl::StrCat(port, "\n")); !s.ok()) {
      server->Shutdown();
      return Fail(std::string(s.message()));
    }
  }
  spdlog::info("Sharder service listening on port {}", port);
  std::thread signal_thread([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("signal {}: stopping", signal_number);
    request_stop();
  });
  signal_thread.detach();  // blocked in sigwait until the process ends
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stop; });
  }
  // A plan in progress gets a little time to finish writing; its directory is atomic anyway.
  server->Shutdown(strata::DeadlineAfter(std::chrono::seconds(5)));
  spdlog::info("Sharder service stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  EnsurePassiveOpenMpWaiting(argv);
  CLI::App app{"Strata sharder: random, mod, stratified and distribution-aware shard plans"};
  strata::shard::ShardFlags flags;
  strata::shard::AddShardFlags(&app, &flags);
  CLI::App* serve = app.add_subcommand("serve", "run the Sharder gRPC service");
  std::string listen = "127.0.0.1:0", port_file, log_file, run_dir;
  serve->add_option("--listen", listen, "address to bind (host:0 picks a free port)");
  serve->add_option("--run-dir", run_dir,
                    "directory every path of a request must stay inside (a run directory, or the "
                    "directory holding the runs); without it, requests may name no paths");
  serve->add_option("--port-file", port_file, "write the bound port here (atomically)");
  serve->add_option("--log-file", log_file, "also log to this file");
  bool insecure_no_auth = false;
  serve->add_flag(strata::kInsecureNoAuthFlag, insecure_no_auth, strata::kInsecureNoAuthHelp);
  strata::TlsFlagValues tls;
  strata::AddTlsFlags(serve, &tls);
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);
  if (serve->parsed()) {
    if (absl::Status s = strata::InitServiceAuth("strata-sharder", insecure_no_auth); !s.ok()) {
      Fail(std::string(s.message()));
      return 2;  // like every service: a start-up refusal, not a failed plan
    }
    if (absl::Status s = strata::InitServiceTls(tls); !s.ok()) {
      Fail(std::string(s.message()));
      return 2;
    }
    return Serve(listen, port_file, log_file, run_dir);
  }
  strata::shard::NoteGivenShardFlags(app, &flags);
  return RunOnce(flags);
}
