// `strata status`, `logs` and `delete` of a Kubernetes submission directory; `strata submit`
// itself is kubernetes_submission.cc.
#include "orchestrator/lib/kubernetes_submission.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/strip.h>

#include "orchestrator/launch/kubectl.h"
#include "orchestrator/launch/kubernetes_state.h"
#include "orchestrator/lib/cluster_run.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"

namespace strata {
namespace {

// What status, logs and delete start from: the record and a kubectl for its namespace. On
// failure the exit code (2) after the message.
struct Opened {
  std::unique_ptr<Kubectl> kubectl;
  std::optional<ClusterRun> run;
  SubmissionPaths paths{""};
};

absl::StatusOr<Opened> Open(const std::string& dir, const SubmissionCommandOptions& options) {
  const std::optional<std::string> found = FindSubmissionDir(dir);
  if (!found) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a Kubernetes submission (no ",
                                            submission_files::kRecord, " in it or in ", dir, "/",
                                            submission_files::kInRunDirectory, ")"));
  }
  SubmissionPaths paths(*found);
  auto record = SubmissionRecord::Read(paths.record);
  if (!record.ok()) return record.status();
  // --kubectl, else the one that created the run if it is still there, else PATH.
  std::string flag = options.kubectl;
  if (flag.empty() && ::access(record->kubectl.c_str(), X_OK) == 0) flag = record->kubectl;
  auto path = FindKubectl(flag);
  if (!path.ok()) return path.status();
  auto kubectl = Kubectl::Create({*path, record->namespace_name, options.kubectl_timeout});
  if (!kubectl.ok()) return kubectl.status();
  Opened o;
  o.kubectl = *std::move(kubectl);
  o.run.emplace(*o.kubectl, *std::move(record), paths);
  o.paths = paths;
  return o;
}

int Fail(const char* command, const absl::Status& status, int code) {
  std::fprintf(stderr, "strata %s: %s\n", command, std::string(status.message()).c_str());
  return code;
}
}  // namespace

std::string LastLines(const std::string& text, int n) {
  if (n < 0) return text;
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int i = 0; i < n; ++i) {
    if (pos == 0) return text;
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return text.substr(pos + 1);
}

std::optional<std::string> FindSubmissionDir(const std::string& dir) {
  for (const std::string& candidate :
       {dir, absl::StrCat(dir, "/", submission_files::kInRunDirectory)}) {
    if (FileExists(SubmissionPaths(candidate).record)) return candidate;
  }
  return std::nullopt;
}

int ShowSubmissionStatus(const std::string& dir, const SubmissionCommandOptions& options) {
  auto opened = Open(dir, options);
  if (!opened.ok()) return Fail("status", opened.status(), 2);
  ClusterRun& run = *opened->run;
  const SubmissionRecord& r = run.record();
  std::printf("submission: %s\n", opened->paths.root.c_str());
  std::printf("job:        %s (overlay %s, image %s), submitted %s\n", r.name.c_str(),
              r.overlay.c_str(), r.image.c_str(), r.submitted_at.c_str());
  std::printf("kubernetes: job/%s in namespace %s, uid %s\n", r.job.c_str(),
              r.namespace_name.c_str(), r.uid.c_str());
  auto job = run.GetJob();
  if (absl::IsFailedPrecondition(job.status())) {
    std::printf("state:      gone (%s)\n", std::string(job.status().message()).c_str());
    return 0;
  }
  if (!job.ok()) return Fail("status", job.status(), 1);
  if (!job->has_value()) {
    std::printf(
        "state:      gone (no job %s in namespace %s: deleted, or removed by its TTL a "
        "day after it ended)\n",
        r.job.c_str(), r.namespace_name.c_str());
    if (FileExists(opened->paths.logs)) {
      std::printf("logs:       %s (saved when the run ended)\n", opened->paths.logs.c_str());
    }
    return 0;
  }
  auto pods = run.GetPods();
  if (!pods.ok()) return Fail("status", pods.status(), 1);
  std::printf("state:      %s\n", Progress(**job, *pods).c_str());
  for (const std::string& f : PodFailures(*pods)) std::printf("failed:     %s\n", f.c_str());
  for (const PodState& p : *pods) {
    std::string state = p.phase.empty() ? "Unknown" : p.phase;
    if (p.ready) absl::StrAppend(&state, ", ready");
    if (auto blocker = StartBlocker(p)) absl::StrAppend(&state, " (", *blocker, ")");
    if (p.deleting) absl::StrAppend(&state, ", being deleted");
    std::printf("  %-14s %-44s %s\n", p.service.c_str(), p.name.c_str(), state.c_str());
  }
  return 0;
}

int ShowSubmissionLogs(const std::string& dir, const std::string& service, int tail_lines,
                       bool follow, const SubmissionCommandOptions& options) {
  auto opened = Open(dir, options);
  if (!opened.ok()) return Fail("logs", opened.status(), 2);
  ClusterRun& run = *opened->run;
  const std::string saved = opened->paths.logs + "/" + service + ".log";
  auto job = run.GetJob();
  if (!job.ok() && !absl::IsFailedPrecondition(job.status())) return Fail("logs", job.status(), 1);
  std::vector<std::string> services;
  if (job.ok() && job->has_value()) {
    auto pods = run.GetPods();
    if (!pods.ok()) return Fail("logs", pods.status(), 1);
    for (const PodState& p : *pods) {
      if (p.service != service && p.name != service) {
        services.push_back(p.service);
        continue;
      }
      if (follow) return Fail("logs", run.FollowPodLog(p, tail_lines), 1);
      auto log = run.PodLog(p, tail_lines);
      if (!log.ok()) return Fail("logs", log.status(), 1);
      std::fwrite(log->data(), 1, log->size(), stdout);
      return 0;
    }
  }
  // The run is over: the logs saved when it ended.
  if (auto log = ReadFile(saved); log.ok()) {
    const std::string text = LastLines(*log, tail_lines);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  return Fail(
      "logs",
      absl::NotFoundError(absl::StrCat(
          "no pod of the run is service '", service, "'",
          services.empty() ? std::string(" (the run has no pods now)")
                           : absl::StrCat(" (the run's: ", absl::StrJoin(services, ", "), ")"),
          " and no log of it was saved in ", opened->paths.logs)),
      1);
}

int DeleteSubmission(const std::string& dir, const SubmissionCommandOptions& options) {
  auto opened = Open(dir, options);
  if (!opened.ok()) return Fail("delete", opened.status(), 2);
  ClusterRun& run = *opened->run;
  const SubmissionRecord& r = run.record();
  auto job = run.GetJob();
  // Another submission of the same job now holds the name: none of it is this run's to delete.
  if (absl::IsFailedPrecondition(job.status())) {
    return Fail("delete", Annotate(job.status(), "nothing deleted"), 1);
  }
  if (!job.ok()) return Fail("delete", job.status(), 1);
  if (job->has_value()) {
    std::printf("deleting job %s in namespace %s and everything it owns\n", r.job.c_str(),
                r.namespace_name.c_str());
    std::fflush(stdout);
    if (absl::Status s = run.DeleteJob(options.delete_timeout); !s.ok()) {
      return Fail("delete", s, 1);
    }
  } else {
    std::printf("job %s is already gone from namespace %s\n", r.job.c_str(),
                r.namespace_name.c_str());
  }
  // The belt: anything of the job's still labelled, owned or not (the claim excepted).
  auto rest = opened->kubectl->Run(
      {"delete", "statefulset,job,pod,service,networkpolicy,configmap,secret", "-l",
       "app.kubernetes.io/instance=" + r.instance, "--ignore-not-found", "--wait=true",
       absl::StrCat("--timeout=", options.delete_timeout.count() / 1000, "s")},
      options.delete_timeout + std::chrono::seconds(15));
  if (!rest.ok()) return Fail("delete", rest.status(), 1);
  const std::string leftovers(absl::StripAsciiWhitespace(*rest));
  if (!leftovers.empty()) std::printf("%s\n", leftovers.c_str());
  std::printf("deleted; claim %s keeps the run record (kubectl delete pvc %s -n %s removes it)\n",
              r.claim.c_str(), r.claim.c_str(), r.namespace_name.c_str());
  return 0;
}

}  // namespace strata
