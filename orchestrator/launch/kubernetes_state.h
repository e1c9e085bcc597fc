// What `strata submit` and `strata status` make of kubectl's answers about a submitted run
// (docs/deploy.md, "strata submit"): the orchestrator Job's state from `kubectl get job -o json`,
// every pod's from `kubectl get pods -o json`, whether a pod is stuck in a way that will not
// resolve by itself (an image that cannot be pulled, a container that cannot be created, no node
// that can take it), which pods failed, and the one progress line. Pure: the clock is an argument.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

enum class JobPhase { kSuspended, kRunning, kSucceeded, kFailed };

struct JobState {
  JobPhase phase = JobPhase::kRunning;
  std::string uid;
  // From the condition that ended the Job (Failed, FailureTarget), or empty.
  std::string reason, message;
  int active = 0, succeeded = 0, failed = 0;
};

struct ContainerState {
  std::string name;
  bool init = false;  // an init container (the sharder of the orchestrator's pod)
  bool ready = false;
  std::string state;   // "waiting", "running" or "terminated"
  std::string reason;  // of the current state: ErrImagePull, CrashLoopBackOff, Error, Completed...
  std::string message;
  int exit_code = 0;  // when terminated
  int restarts = 0;
};

struct PodState {
  std::string name;
  // "ps-0", "worker-1", "evaluator", "orchestrator" (as in a local run's logs/), from the pod's
  // labels; the pod's name for a pod that is not one of ours.
  std::string service;
  std::string phase;  // Pending, Running, Succeeded, Failed, Unknown
  bool ready = false;
  bool deleting = false;      // has a deletionTimestamp: on its way out, not counted
  std::string unschedulable;  // the scheduler's message while PodScheduled is False, or empty
  std::vector<ContainerState> containers;  // init containers first
};

// `kubectl get job NAME -o json`. InvalidArgument when the text is not a Job.
absl::StatusOr<JobState> ParseJob(std::string_view json);

// `kubectl get pods -l ... -o json` (a List), sorted by service name.
absl::StatusOr<std::vector<PodState>> ParsePods(std::string_view json);

// "running", "succeeded", "suspended", "failed (BackoffLimitExceeded: Job has reached ...)".
std::string DescribeJob(const JobState& job);

// Why `pod` cannot start without someone's help, or nullopt: its image cannot be pulled
// (ErrImagePull, ImagePullBackOff, InvalidImageName, ErrImageNeverPull), a container cannot be
// created (CreateContainerConfigError: a missing ConfigMap or Secret; CreateContainerError), or
// no node can take it (Unschedulable). Such states can pass (a registry hiccup, a claim being
// bound, a node being added), so the caller gives them a deadline (StartWatch).
std::optional<std::string> StartBlocker(const PodState& pod);

// Remembers since when each pod has been blocked (StartBlocker), across polls.
class StartWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StartWatch(Clock::duration limit) : limit_(limit) {}
  // The first pod blocked for at least `limit` as of `now`, as "worker-1 (pod NAME): REASON";
  // a pod that is no longer blocked starts afresh.
  std::optional<std::string> Update(const std::vector<PodState>& pods, Clock::time_point now);

 private:
  Clock::duration limit_;
  std::map<std::string, Clock::time_point> since_;
};

// Every container of `pods` that ended badly (a non-zero exit, a reason other than Completed) or
// whose pod failed: "worker-1 (pod NAME): container worker exited with code 1 (Error)".
std::vector<std::string> PodFailures(const std::vector<PodState>& pods);

// One line: "running; pods ready 4/5; worker-1 Pending (ContainerCreating)".
std::string Progress(const JobState& job, const std::vector<PodState>& pods);

}  // namespace strata
