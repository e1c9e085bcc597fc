#include "orchestrator/lib/cluster_run.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include "services/common/base/files.h"

namespace strata {

nlohmann::json SubmissionRecord::ToJson() const {
  return {{"name", name},
          {"instance", instance},
          {"job", job},
          {"uid", uid},
          {"namespace", namespace_name},
          {"kubectl", kubectl},
          {"claim", claim},
          {"overlay", overlay.empty() ? "base" : overlay},
          {"image", image},
          {"submitted_at", submitted_at}};
}

absl::StatusOr<SubmissionRecord> SubmissionRecord::Read(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a submission record (JSON)"));
  }
  SubmissionRecord r;
  r.name = j.value("name", "");
  r.instance = j.value("instance", "");
  r.job = j.value("job", "");
  r.uid = j.value("uid", "");
  r.namespace_name = j.value("namespace", "");
  r.kubectl = j.value("kubectl", "");
  r.claim = j.value("claim", "");
  r.overlay = j.value("overlay", "");
  r.image = j.value("image", "");
  r.submitted_at = j.value("submitted_at", "");
  if (r.job.empty() || r.uid.empty() || r.namespace_name.empty() || r.instance.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the record lacks the job, its UID, namespace or instance"));
  }
  return r;
}

absl::StatusOr<std::optional<JobState>> ClusterRun::GetJob() {
  auto out = kubectl_.Run({"get", "job", record_.job, "-o", "json", "--ignore-not-found"});
  if (!out.ok()) return out.status();
  if (absl::StripAsciiWhitespace(*out).empty()) return std::optional<JobState>();
  auto job = ParseJob(*out);
  if (!job.ok()) return job.status();
  if (job->uid != record_.uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", record_.job, " in namespace ", record_.namespace_name,
        " is another submission (uid ", job->uid, ", this one's was ", record_.uid, ")"));
  }
  return std::optional<JobState>(*std::move(job));
}

absl::StatusOr<std::vector<PodState>> ClusterRun::GetPods() {
  auto out = kubectl_.Run(
      {"get", "pods", "-l", "app.kubernetes.io/instance=" + record_.instance, "-o", "json"});
  if (!out.ok()) return out.status();
  return ParsePods(*out);
}

namespace {

std::vector<std::string> PodLogArgs(const PodState& pod, int tail_lines, bool follow) {
  std::vector<std::string> args = {"logs", pod.name, "--all-containers=true"};
  if (pod.containers.size() > 1) args.push_back("--prefix=true");
  if (tail_lines >= 0) args.push_back(absl::StrCat("--tail=", tail_lines));
  if (follow) args.push_back("--follow=true");
  return args;
}

}  // namespace

absl::StatusOr<std::string> ClusterRun::PodLog(const PodState& pod, int tail_lines) {
  return kubectl_.Run(PodLogArgs(pod, tail_lines, /*follow=*/false));
}

absl::Status ClusterRun::FollowPodLog(const PodState& pod, int tail_lines) {
  return kubectl_.Exec(PodLogArgs(pod, tail_lines, /*follow=*/true));
}

int ClusterRun::SaveLogs(const std::vector<PodState>& pods) {
  int saved = 0;
  if (pods.empty() || !MakeDirs(paths_.logs).ok()) return 0;
  for (const PodState& pod : pods) {
    if (pod.deleting) continue;
    auto log = PodLog(pod, -1);
    if (!log.ok()) continue;  // a pod that never started has no log
    if (WriteFileAtomic(paths_.logs + "/" + pod.service + ".log", *log).ok()) ++saved;
  }
  return saved;
}

absl::Status ClusterRun::DeleteJob(std::chrono::milliseconds timeout) {
  // kubectl gives up on its own first; the kill is the backstop.
  return kubectl_
      .Run({"delete", "job", record_.job, "--cascade=foreground", "--ignore-not-found",
            "--wait=true", absl::StrCat("--timeout=", timeout.count() / 1000, "s")},
           timeout + std::chrono::seconds(15))
      .status();
}

}  // namespace strata
