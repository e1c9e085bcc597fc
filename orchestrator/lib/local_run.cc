#include "orchestrator/lib/local_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "orchestrator/lib/run_driver.h"
#include "orchestrator/lib/stream_run.h"
#include "orchestrator/plan/job_checks.h"
#include "orchestrator/run/resume_point.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/rpc_auth.h"

namespace strata {
namespace {

std::string Timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm;
  ::localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// False, having said which one, when a service binary the job needs is not in `bin_dir`.
bool HaveServiceBinaries(const char* command, const v1::ResolvedJob& job,
                         const std::string& bin_dir) {
  // A stream job runs replicas (strata-worker), and through servers also the servers and the
  // evaluator that writes their initial model; the producer is `strata produce`.
  std::vector<std::string> needed = {"strata-worker"};
  const bool stream = job.strategy().kind() == v1::STRATEGY_KIND_STREAM;
  const bool stream_servers = stream && job.stream().sync() == v1::STREAM_SYNC_SERVERS;
  if (!stream) needed.push_back("strata-sharder");
  if (!stream || stream_servers) needed.push_back("strata-evaluator");
  if (UsesServers(job) || stream_servers) needed.push_back("strata-ps");
  for (const std::string& bin : needed) {
    const std::string path = absl::StrCat(bin_dir, "/", bin);
    if (::access(path.c_str(), X_OK) != 0) {
      std::fprintf(stderr,
                   "%s: %s is missing (build it: cmake --build build --target %s); nothing was "
                   "launched\n",
                   command, path.c_str(), bin.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

std::string DefaultRunDir(const std::string& job_name) {
  return absl::StrCat("runs/", job_name, "-", Timestamp());
}

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
  check.bin_dir = options.bin_dir;
  std::optional<v1::ResolvedJob> job = LoadJobOrSayWhy("strata run", options.job_path, check);
  if (!job) return 2;
  if (!HaveServiceBinaries("strata run", *job, options.bin_dir)) return 2;
  std::string dir = options.out_dir.empty() ? DefaultRunDir(job->name()) : options.out_dir;
  if (FileExists(dir + "/job.yaml")) {
    std::fprintf(stderr, "strata run: %s already holds a run; choose another --out\n", dir.c_str());
    return 2;
  }
  if (options.hosts && job->launcher().ring_transport() != v1::RING_TRANSPORT_TCP &&
      job->strategy().kind() != v1::STRATEGY_KIND_STREAM) {
    // An abstract socket exists only in its own network namespace: between hosts the ring runs
    // over TCP, as between containers.
    if (!options.quiet) {
      std::printf("strata run: on emulated hosts the ring runs over TCP (launcher.ring_transport "
                  "tcp): an abstract socket is not reachable from another host\n");
    }
    job->mutable_launcher()->set_ring_transport(v1::RING_TRANSPORT_TCP);
  }
  if (job->strategy().kind() == v1::STRATEGY_KIND_STREAM) {
    return RunStreamJob(options, std::move(*job), dir);
  }
  RunDriver run(options, std::move(*job), dir);
  return run.Run();
}

int ResumeLocalJob(const LocalRunOptions& options) {
  const RunPaths paths(options.out_dir);
  JobCheckOptions check;
  check.for_run = true;
  auto job = LoadAndCheckJob(paths.job_yaml, check);
  if (!job.ok()) {
    std::fprintf(
        stderr, "strata resume: %s: %s; nothing was launched\n", paths.root.c_str(),
        FileExists(paths.job_yaml)
            ? absl::StrCat("its job.yaml is not a valid job spec:\n", job.status().message())
                  .c_str()
            : "not a run directory (no job.yaml)");
    return 2;
  }
  if (job->launcher().kind() != v1::LAUNCHER_KIND_LOCAL) {
    std::fprintf(stderr,
                 "strata resume: %s ran with launcher.kind %s; only local runs are resumed here "
                 "(a container run is not restarted: its dead services fail it); nothing was "
                 "launched\n",
                 paths.root.c_str(), Spelled(job->launcher().kind()).c_str());
    return 2;
  }
  if (!HaveServiceBinaries("strata resume", *job, options.bin_dir)) return 2;
  auto point = FindResumePoint(paths, *job);
  if (!point.ok()) {
    std::fprintf(stderr, "strata resume: %s; nothing was launched\n",
                 std::string(point.status().message()).c_str());
    return 2;
  }
  LocalRunOptions resumed = options;
  resumed.job_path = paths.job_yaml;
  resumed.overrides.clear();
  RunDriver run(resumed, std::move(*job), paths.root, std::move(*point));
  return run.Run();
}

int SuperviseJob(const LocalRunOptions& options) {
  JobCheckOptions check;
  check.overrides = options.overrides;
  std::optional<v1::ResolvedJob> job =
      LoadJobOrSayWhy("strata supervise", options.job_path, check, "started");
  if (!job) return 2;
  const v1::ResolvedJob& spec = *job;
  const AttachedServices& given = *options.attached;
  std::vector<std::string> errors;
  auto count = [&](const char* flag, size_t got, int want, const char* key) {
    if (static_cast<int>(got) != want) {
      errors.push_back(
          absl::StrFormat("%s gives %d address(es) but the job has %s = %d", flag, got, key, want));
    }
  };
  count("--workers", given.workers.size(), spec.cluster().workers(), "cluster.workers");
  count("--parameter-servers", given.parameter_servers.size(),
        UsesServers(spec) ? spec.cluster().parameter_servers() : 0,
        UsesServers(spec) ? "cluster.parameter_servers" : "(strategy.kind allreduce) servers");
  if (given.evaluator.empty()) errors.push_back("--evaluator is required");
  if (!errors.empty()) {
    std::fprintf(stderr, "strata supervise: nothing was started:\n%s\n",
                 absl::StrJoin(errors, "\n").c_str());
    return 2;
  }
  const char* token = std::getenv(kRunTokenEnv);
  if (token == nullptr || *token == '\0') {
    std::fprintf(stderr,
                 "strata supervise: no run token: %s must hold the token the services were "
                 "started with (docs/security.md); nothing was started\n",
                 kRunTokenEnv);
    return 2;
  }
  if (FileExists(options.out_dir + "/job.yaml")) {
    std::fprintf(stderr,
                 "strata supervise: %s already holds a run's record (job.yaml); a run directory "
                 "serves one run\n",
                 options.out_dir.c_str());
    return 2;
  }
  RunDriver run(options, std::move(*job), options.out_dir);
  return run.Run();
}

}  // namespace strata
