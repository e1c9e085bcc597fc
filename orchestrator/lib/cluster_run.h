// What `strata submit`, `status`, `logs` and `delete` share about one run on a Kubernetes cluster
// (docs/deploy.md, "strata submit"): the record that finds the run again (submission.json; the
// submission's files are named in services/common/base/run_directory.h), and kubectl's answers
// about the run. Used by
// kubernetes_submission.cc (submit) and submission_commands.cc (status, logs, delete) only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "orchestrator/launch/kubectl.h"
#include "orchestrator/launch/kubernetes_state.h"
#include "services/common/base/run_directory.h"

namespace strata {

// What the next command needs to find the run again.
struct SubmissionRecord {
  std::string name;      // the job spec's name
  std::string instance;  // label app.kubernetes.io/instance of every object
  std::string job;       // the orchestrator Job
  std::string uid;       // its UID: a Job of that name with another UID is another submission
  std::string namespace_name;
  std::string kubectl;  // the kubectl that created it
  std::string claim;    // the run volume's claim, kept after the run
  std::string overlay;
  std::string image;
  std::string submitted_at;  // UTC, ISO 8601

  nlohmann::json ToJson() const;
  // InvalidArgument, naming the file, when it is not a record or lacks the Job, its UID,
  // namespace or instance.
  static absl::StatusOr<SubmissionRecord> Read(const std::string& path);
};

// kubectl's answers about one run, and deleting it.
class ClusterRun {
 public:
  ClusterRun(Kubectl& kubectl, SubmissionRecord record, SubmissionPaths paths)
      : kubectl_(kubectl), record_(std::move(record)), paths_(std::move(paths)) {}

  const SubmissionRecord& record() const { return record_; }

  // The Job, or nullopt when no Job of that name exists. A Job of that name with another UID is
  // another submission: FailedPrecondition, so that nothing of it is touched.
  absl::StatusOr<std::optional<JobState>> GetJob();

  absl::StatusOr<std::vector<PodState>> GetPods();

  // The log of one pod, every container of it.
  absl::StatusOr<std::string> PodLog(const PodState& pod, int tail_lines);

  // Becomes `kubectl logs -f` of the pod (Kubectl::Exec); returns only if that cannot start.
  absl::Status FollowPodLog(const PodState& pod, int tail_lines);

  // Saves every pod's log into logs/<service>.log before the pods go; best effort. Returns how
  // many it saved.
  int SaveLogs(const std::vector<PodState>& pods);

  // Deletes the Job in the foreground: its owned objects go first, and kubectl returns once they
  // are gone (or at the deadline, when the cluster carries on).
  absl::Status DeleteJob(std::chrono::milliseconds timeout);

 private:
  Kubectl& kubectl_;
  SubmissionRecord record_;
  SubmissionPaths paths_;
};

}  // namespace strata
