#include "orchestrator/lib/kubernetes_submission.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "orchestrator/launch/kubectl.h"
#include "orchestrator/launch/kubernetes_render.h"
#include "orchestrator/launch/kubernetes_state.h"
#include "orchestrator/lib/cluster_run.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/plan/job_checks.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/process/interrupt.h"
#include "services/common/wire/rpc_auth.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Sleeps `d` unless a signal comes first.
void SleepUnlessInterrupted(milliseconds d) {
  const auto until = Clock::now() + d;
  while (!Interrupted() && Clock::now() < until) {
    // Nothing to wait on but the clock and the signal flag.
    std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), milliseconds(50)));
  }
}

// Now, in UTC, as ISO 8601: when the submission was made.
std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A file only its owner may read (the run token, the Secret): created with mode 0600, never
// wider, even for a moment.
absl::Status WritePrivateFile(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  ::fchmod(fd, 0600);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

std::string Seconds(milliseconds d) {
  return absl::StrCat(std::chrono::duration<double>(d).count());
}

// One `strata submit`: creates the objects, then follows the Job (see the header).
class Submission {
 public:
  Submission(const SubmitOptions& options, Kubectl& kubectl, KubernetesSubmission objects,
             SubmissionRecord record, SubmissionPaths paths)
      : options_(options),
        kubectl_(kubectl),
        objects_(std::move(objects)),
        record_(std::move(record)),
        paths_(std::move(paths)) {}

  int Run() {
    if (const int code = Create(); code >= 0) return code;
    if (options_.detach) {
      std::printf(
          "detached: job %s runs on; follow it with `strata status %s` and `strata logs %s`, "
          "end it with `strata delete %s` (nothing else removes its servers before the Job's "
          "TTL, a day after it ends)\n",
          record_.job.c_str(), paths_.root.c_str(), paths_.root.c_str(), paths_.root.c_str());
      return 0;
    }
    return Follow();
  }

 private:
  static int Error(const std::string& message) {
    std::fflush(stdout);  // in order with the progress lines when both go to one file
    std::fprintf(stderr, "strata submit: %s\n", message.c_str());
    return 1;
  }

  // Creates the Job, then the rest; -1 when everything exists, else the exit code (after
  // deleting what was created).
  int Create() {
    // 1. The orchestrator Job, suspended: its UID owns the rest.
    const std::string kFormat = "jsonpath={.metadata.uid} {.metadata.namespace}";
    auto created = kubectl_.Run({"create", "-f", paths_.job, "-o", kFormat});
    if (!created.ok()) {
      // A call killed at its deadline may have created the Job; any other failure did not (and
      // an existing Job of that name, AlreadyExists, is not ours to delete).
      if (absl::IsDeadlineExceeded(created.status())) DeleteJobByName();
      return Error(absl::StrCat("could not create job ", record_.job, ": ",
                                created.status().message(), "\nnothing of the run is left"));
    }
    const std::vector<std::string> words =
        absl::StrSplit(absl::StripAsciiWhitespace(*created), ' ', absl::SkipEmpty());
    if (words.empty()) {
      DeleteJobByName();
      return Error(absl::StrCat("kubectl created job ", record_.job,
                                " but did not print its UID (it printed '", *created, "')"));
    }
    record_.uid = words[0];
    if (words.size() > 1) record_.namespace_name = words[1];
    if (record_.namespace_name.empty()) record_.namespace_name = "default";
    kubectl_.set_namespace(record_.namespace_name);
    cluster_.emplace(kubectl_, record_, paths_);
    // The record first: whatever happens next, `strata delete DIR` can find the Job.
    if (absl::Status s = WriteFileAtomic(paths_.record, record_.ToJson().dump(2) + "\n"); !s.ok()) {
      return Rollback(absl::StrCat("cannot write the submission record: ", s.message()));
    }
    std::printf("created job %s in namespace %s (uid %s), suspended until what it owns exists\n",
                record_.job.c_str(), record_.namespace_name.c_str(), record_.uid.c_str());
    if (Interrupted()) return Interrupt();

    // 2. The run volume's claim: kept after the run, so applied (an earlier run's is reused).
    auto claim = kubectl_.Run({"apply", "-f", paths_.run_volume});
    if (!claim.ok()) return Rollback(std::string(claim.status().message()));
    claim_created_ = absl::EndsWith(absl::StripAsciiWhitespace(*claim), " created");
    if (Interrupted()) return Interrupt();

    // 3. Everything else, owned by the Job.
    const int owned = AddOwnerReferences({record_.job, record_.uid}, &objects_.owned);
    if (absl::Status s = WritePrivateFile(paths_.owned, yaml::EmitAll(objects_.owned)); !s.ok()) {
      return Rollback(std::string(s.message()));
    }
    auto rest = kubectl_.Run({"create", "-f", paths_.owned});
    if (!rest.ok()) {
      return Rollback(absl::StrCat(
          rest.status().message(),
          absl::StrContains(rest.status().message(), "AlreadyExists")
              ? absl::StrCat("\nobjects of job ", record_.name,
                             " from an earlier run are in the "
                             "way: `kubectl delete all,networkpolicy,configmap,secret -l "
                             "app.kubernetes.io/instance=",
                             record_.instance, " -n ", record_.namespace_name, "` removes them")
              : ""));
    }
    std::printf("created %d object(s) owned by it; claim %s %s\n", owned, record_.claim.c_str(),
                claim_created_ ? "created" : "already there, reused");
    if (Interrupted()) return Interrupt();

    // 4. Go.
    auto resumed = kubectl_.Run(
        {"patch", "job", record_.job, "--type=merge", "-p", R"({"spec":{"suspend":false}})"});
    if (!resumed.ok()) return Rollback(std::string(resumed.status().message()));
    std::printf("resumed job %s\n", record_.job.c_str());
    std::fflush(stdout);
    return -1;
  }

  // The run ended while being created: delete the Job (and with it whatever it already owns),
  // and the claim if this submission made it (it holds nothing yet).
  int Rollback(const std::string& why) {
    Error(why);
    Error(absl::StrCat("deleting job ", record_.job, " and what it owns"));
    int code = 1;
    if (absl::Status s = cluster_->DeleteJob(options_.delete_timeout); !s.ok()) {
      code = Error(absl::StrCat("could not delete it: ", s.message(), "; try `strata delete ",
                                paths_.root, "`"));
    }
    if (claim_created_) {
      auto s = kubectl_.Run({"delete", "pvc", record_.claim, "--ignore-not-found", "--wait=false"});
      if (!s.ok()) {
        code = Error(
            absl::StrCat("could not delete claim ", record_.claim, ": ", s.status().message()));
      }
    }
    return code;
  }

  int Interrupt() {
    Rollback("interrupted while creating the run's objects");
    return 130;
  }

  // When `kubectl create` of the Job was killed at its deadline or printed no UID, the Job may
  // exist all the same; no record holds its UID yet.
  void DeleteJobByName() {
    auto s = kubectl_.Run({"delete", "job", record_.job, "--ignore-not-found", "--wait=false"});
    if (!s.ok()) Error(std::string(s.status().message()));
  }

  int Follow() {
    const Clock::time_point start = Clock::now();
    StartWatch watch(options_.start_timeout);
    std::string last_line;
    int failed_looks = 0;
    std::vector<PodState> pods;
    for (;;) {
      if (Interrupted()) {
        Error(absl::StrCat("interrupted (", ::strsignal(Interrupted()), ")"));
        Finish(pods);
        return 130;
      }
      absl::StatusOr<std::optional<JobState>> job = cluster_->GetJob();
      if (job.ok() && !job->has_value()) {
        return Error(absl::StrCat("job ", record_.job, " no longer exists in namespace ",
                                  record_.namespace_name, ": it was deleted by someone else"));
      }
      // Another submission took the name: none of it is ours to delete.
      if (absl::IsFailedPrecondition(job.status())) {
        return Error(std::string(job.status().message()));
      }
      absl::Status looked = job.status();
      if (looked.ok()) {
        auto now_pods = cluster_->GetPods();
        if (now_pods.ok()) {
          pods = *std::move(now_pods);
        } else {
          looked = now_pods.status();
        }
      }
      if (!looked.ok()) {
        // One failed look is not the run's end (an API server restarting); three in a row are.
        const absl::Status& s = looked;
        if (++failed_looks < kLooksBeforeGivingUp) {
          std::fprintf(stderr, "strata submit: warning: %s\n", std::string(s.message()).c_str());
          SleepUnlessInterrupted(options_.poll_interval);
          continue;
        }
        Error(absl::StrCat("cannot follow the job: ", s.message()));
        Finish(pods, /*save_logs=*/false);  // kubectl is not answering: no time for N more calls
        return 1;
      }
      failed_looks = 0;
      const JobState& state = **job;
      const Clock::time_point now = Clock::now();
      const std::string line = Progress(state, pods);
      if (line != last_line) {
        std::printf("[%6.0f s] %s\n", std::chrono::duration<double>(now - start).count(),
                    line.c_str());
        std::fflush(stdout);
        last_line = line;
      }
      if (state.phase == JobPhase::kSucceeded) {
        std::printf("done: job %s succeeded in %.0f s\n", record_.job.c_str(),
                    std::chrono::duration<double>(now - start).count());
        return Finish(pods);
      }
      if (state.phase == JobPhase::kFailed) {
        std::string message = absl::StrCat("job ", record_.job, " ", DescribeJob(state));
        for (const std::string& f : PodFailures(pods)) absl::StrAppend(&message, "\n  ", f);
        Error(message);
        Finish(pods);
        PrintOrchestratorLogTail();
        return 1;
      }
      if (std::optional<std::string> stuck = watch.Update(pods, now)) {
        Error(absl::StrCat(*stuck, " (--start-timeout ", Seconds(options_.start_timeout), " s)"));
        Finish(pods);
        return 1;
      }
      if (now - start >= options_.timeout) {
        Error(absl::StrCat("job ", record_.job, " still runs after ", Seconds(options_.timeout),
                           " s (--timeout)"));
        Finish(pods);
        return 1;
      }
      SleepUnlessInterrupted(options_.poll_interval);
    }
  }

  // The end of every followed run: the pods' logs saved, the Job deleted with everything it
  // owns. 0 when both went well, else 1.
  int Finish(const std::vector<PodState>& pods, bool save_logs = true) {
    const int saved = save_logs ? cluster_->SaveLogs(pods) : 0;
    if (saved > 0) std::printf("saved the logs of %d pod(s) in %s\n", saved, paths_.logs.c_str());
    std::printf("deleting job %s and everything it owns\n", record_.job.c_str());
    std::fflush(stdout);
    if (absl::Status s = cluster_->DeleteJob(options_.delete_timeout); !s.ok()) {
      return Error(absl::StrCat("could not delete job ", record_.job, ": ", s.message(),
                                "; try `strata delete ", paths_.root, "`"));
    }
    std::printf("deleted; claim %s keeps the run record (kubectl delete pvc %s -n %s removes it)\n",
                record_.claim.c_str(), record_.claim.c_str(), record_.namespace_name.c_str());
    return 0;
  }

  void PrintOrchestratorLogTail() {
    auto log = ReadFile(paths_.logs + "/orchestrator.log");
    if (!log.ok() || log->empty()) return;
    std::fprintf(stderr, "the orchestrator's log ends:\n%s", LastLines(*log, 20).c_str());
    if (log->back() != '\n') std::fprintf(stderr, "\n");
  }

  static constexpr int kLooksBeforeGivingUp = 3;

  const SubmitOptions& options_;
  Kubectl& kubectl_;
  KubernetesSubmission objects_;
  SubmissionRecord record_;
  SubmissionPaths paths_;
  std::optional<ClusterRun> cluster_;
  bool claim_created_ = false;
};
}  // namespace

int SubmitKubernetesJob(const SubmitOptions& options) {
  auto usage = [](const std::string& message) {
    std::fprintf(stderr, "strata submit: %s\n", message.c_str());
    return 2;
  };
  if (options.render.image.empty()) return usage("--image: the image name is empty");
  if (options.poll_interval <= milliseconds(0) || options.kubectl_timeout <= milliseconds(0) ||
      options.timeout <= milliseconds(0) || options.start_timeout < milliseconds(0) ||
      options.delete_timeout <= milliseconds(0)) {
    return usage(
        "--timeout, --poll-interval, --kubectl-timeout and --delete-timeout must be "
        "positive, --start-timeout at least 0");
  }
  auto spec = LoadContainerJob(options.job_path, options.overrides, v1::LAUNCHER_KIND_KUBERNETES);
  if (!spec.ok()) return usage(std::string(spec.status().message()));
  auto kubectl_path = FindKubectl(options.kubectl);
  if (!kubectl_path.ok()) {
    return usage(absl::StrCat(kubectl_path.status().message(), "; nothing was submitted"));
  }
  auto token = GenerateRunToken();
  if (!token.ok()) return usage(std::string(token.status().message()));
  auto objects = RenderKubernetesSubmission(*spec, options.render, options.overlay, *token);
  if (!objects.ok()) return usage(std::string(objects.status().message()));
  auto files = RenderKubernetes(*spec, options.render);
  if (!files.ok()) return usage(std::string(files.status().message()));

  const SubmissionPaths paths(
      options.out_dir.empty()
          ? absl::StrCat(DefaultRunDir(spec->name()), "/", submission_files::kInRunDirectory)
          : options.out_dir);
  if (FileExists(paths.record)) {
    return usage(absl::StrCat(paths.root, " already holds a submission; choose another --out"));
  }
  // Everything on disk before anything is created: the files `strata render` writes (to read,
  // or to apply again by hand), the token where the kustomize base expects it, and the objects.
  files->emplace(
      submission_files::kSubmittedGitignore,
      absl::StrCat("# The Secret with the run token: never committed.\n",
                   std::filesystem::path(submission_files::kSubmittedOwned).filename().string(),
                   "\n"));
  files->emplace(submission_files::kSubmittedJob, yaml::Emit(objects->job));
  files->emplace(submission_files::kSubmittedRunVolume, yaml::Emit(objects->run_volume));
  if (absl::Status s = WriteRenderedFiles(paths.root, *files); !s.ok()) {
    return usage(std::string(s.message()));
  }
  if (absl::Status s = WritePrivateFile(paths.token, *token); !s.ok()) {
    return usage(std::string(s.message()));
  }

  SubmissionRecord record;
  record.name = spec->name();
  record.instance = objects->instance;
  record.job = objects->job_name;
  record.namespace_name = options.namespace_name;
  record.kubectl = *kubectl_path;
  record.claim = objects->instance + "-run";
  record.overlay = options.overlay;
  record.image = options.render.image;
  record.submitted_at = UtcNow();
  auto kubectl = Kubectl::Create({*kubectl_path, options.namespace_name, options.kubectl_timeout});
  if (!kubectl.ok()) return usage(std::string(kubectl.status().message()));

  std::printf("strata submit: %s (overlay %s, image %s) with %s; submission directory %s\n",
              spec->name().c_str(), options.overlay.empty() ? "base" : options.overlay.c_str(),
              options.render.image.c_str(), kubectl_path->c_str(), paths.root.c_str());
  std::fflush(stdout);
  // Ctrl-C (or SIGTERM, SIGHUP) asks for an orderly end: the run is deleted. A second Ctrl-C ends
  // `strata` at once (kubectl calls die with it).
  InterruptOptions interrupt;
  interrupt.second_signal_ends_process = true;
  InstallInterruptHandlers(interrupt);
  Submission submission(options, **kubectl, *std::move(objects), std::move(record), paths);
  return submission.Run();
}

}  // namespace strata
