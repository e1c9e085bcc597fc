#include "orchestrator/launch/kubernetes_state.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

using nlohmann::json;

std::string Text(const json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

int Int(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
}

const json& Child(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it != j.end() ? *it : kNull;
}

bool AllDigits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// The service a pod runs, named as in a local run (logs/<service>.log), from the labels and
// annotations the renderer and the controllers put on it.
std::string ServiceOf(const json& metadata) {
  const std::string name = Text(metadata, "name");
  const json& labels = Child(metadata, "labels");
  const json& annotations = Child(metadata, "annotations");
  const std::string component = Text(labels, "app.kubernetes.io/component");
  if (component == "orchestrator" || component == "evaluator") return component;
  if (component == "ps" || component == "worker") {
    // An Indexed Job's pod: the partition or rank is the completion index (an annotation since
    // 1.21); a server of an earlier renderer's StatefulSet is <set>-<ordinal>.
    std::string index = Text(annotations, "batch.kubernetes.io/job-completion-index");
    if (index.empty()) index = Text(labels, "batch.kubernetes.io/job-completion-index");
    if (index.empty() && component == "ps") index = Text(labels, "apps.kubernetes.io/pod-index");
    if (index.empty() && component == "ps") index = name.substr(name.rfind('-') + 1);
    if (AllDigits(index)) return (component == "ps" ? "ps-" : "worker-") + index;
  }
  return name;
}

ContainerState ParseContainer(const json& status, bool init) {
  ContainerState c;
  c.name = Text(status, "name");
  c.init = init;
  c.ready = Child(status, "ready").is_boolean() && status["ready"].get<bool>();
  c.restarts = Int(status, "restartCount");
  const json& state = Child(status, "state");
  for (const char* kind : {"waiting", "running", "terminated"}) {
    const json& s = Child(state, kind);
    if (!s.is_object()) continue;
    c.state = kind;
    c.reason = Text(s, "reason");
    c.message = Text(s, "message");
    c.exit_code = Int(s, "exitCode");
    break;
  }
  return c;
}

PodState ParsePod(const json& pod) {
  PodState p;
  const json& metadata = Child(pod, "metadata");
  p.name = Text(metadata, "name");
  p.service = ServiceOf(metadata);
  p.deleting = !Text(metadata, "deletionTimestamp").empty();
  const json& status = Child(pod, "status");
  p.phase = Text(status, "phase");
  for (const json& c :
       Child(status, "conditions").is_array() ? status["conditions"] : json::array()) {
    const std::string type = Text(c, "type");
    const bool is_true = Text(c, "status") == "True";
    if (type == "Ready") p.ready = is_true;
    if (type == "PodScheduled" && !is_true && Text(c, "reason") == "Unschedulable") {
      p.unschedulable = Text(c, "message");
      if (p.unschedulable.empty()) p.unschedulable = "no node can take it";
    }
  }
  for (const auto& [key, init] :
       {std::pair{"initContainerStatuses", true}, std::pair{"containerStatuses", false}}) {
    const json& list = Child(status, key);
    if (!list.is_array()) continue;
    for (const json& c : list) p.containers.push_back(ParseContainer(c, init));
  }
  return p;
}

absl::StatusOr<json> ParseObject(std::string_view text, const char* kind) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("kubectl did not answer with a ", kind,
                                                   " in JSON: '", std::string(text.substr(0, 200)),
                                                   "'"));
  }
  return j;
}

// The pod's state in a word or two: "Pending (ContainerCreating)", "Running (not ready)".
std::string Brief(const PodState& p) {
  std::string detail;
  if (!p.unschedulable.empty()) detail = "Unschedulable";
  for (const ContainerState& c : p.containers) {
    if (!detail.empty()) break;
    if (c.state == "waiting" && !c.reason.empty()) detail = c.reason;
    if (c.state == "terminated" && c.exit_code != 0) {
      detail = absl::StrCat(c.name, " exited with code ", c.exit_code);
    }
  }
  if (detail.empty() && p.phase == "Running" && !p.ready) detail = "not ready";
  const std::string phase = p.phase.empty() ? "Unknown" : p.phase;
  return detail.empty() ? phase : absl::StrCat(phase, " (", detail, ")");
}

}  // namespace

absl::StatusOr<JobState> ParseJob(std::string_view text) {
  auto j = ParseObject(text, "Job");
  if (!j.ok()) return j.status();
  if (Text(*j, "kind") != "Job") {
    return absl::InvalidArgumentError(
        absl::StrCat("kubectl answered with a '", Text(*j, "kind"), "' where a Job was asked for"));
  }
  JobState job;
  job.uid = Text(Child(*j, "metadata"), "uid");
  const json& status = Child(*j, "status");
  job.active = Int(status, "active");
  job.succeeded = Int(status, "succeeded");
  job.failed = Int(status, "failed");
  bool suspended = false, complete = false, failed = false;
  const json& conditions = Child(status, "conditions");
  for (const json& c : conditions.is_array() ? conditions : json::array()) {
    if (Text(c, "status") != "True") continue;
    const std::string type = Text(c, "type");
    if (type == "Suspended") suspended = true;
    if (type == "Complete") complete = true;
    // FailureTarget (1.31+) comes first, Failed once the pods are gone: either ends the run.
    if (type == "Failed" || type == "FailureTarget") {
      failed = true;
      if (job.reason.empty() || type == "Failed") {
        job.reason = Text(c, "reason");
        job.message = Text(c, "message");
      }
    }
  }
  // A suspended Job has no Suspended condition until the controller sees it.
  const json& spec = Child(*j, "spec");
  if (Child(spec, "suspend").is_boolean() && spec["suspend"].get<bool>()) suspended = true;
  job.phase = failed      ? JobPhase::kFailed
              : complete  ? JobPhase::kSucceeded
              : suspended ? JobPhase::kSuspended
                          : JobPhase::kRunning;
  return job;
}

absl::StatusOr<std::vector<PodState>> ParsePods(std::string_view text) {
  auto j = ParseObject(text, "list of pods");
  if (!j.ok()) return j.status();
  const json& items = Child(*j, "items");
  if (!items.is_array()) {
    return absl::InvalidArgumentError("kubectl's list of pods has no 'items'");
  }
  std::vector<PodState> pods;
  for (const json& item : items) pods.push_back(ParsePod(item));
  std::sort(pods.begin(), pods.end(), [](const PodState& a, const PodState& b) {
    return std::tie(a.service, a.name) < std::tie(b.service, b.name);
  });
  return pods;
}

std::string DescribeJob(const JobState& job) {
  switch (job.phase) {
    case JobPhase::kSuspended:
      return "suspended";
    case JobPhase::kSucceeded:
      return "succeeded";
    case JobPhase::kFailed: {
      std::string why = job.reason;
      if (!job.message.empty())
        why = why.empty() ? job.message : absl::StrCat(why, ": ", job.message);
      return why.empty() ? "failed" : absl::StrCat("failed (", why, ")");
    }
    case JobPhase::kRunning:
      break;
  }
  return "running";
}

std::optional<std::string> StartBlocker(const PodState& pod) {
  if (pod.deleting || pod.phase != "Pending") return std::nullopt;
  static const std::set<std::string> kBlocked = {
      "ErrImagePull",      "ImagePullBackOff",           "InvalidImageName",
      "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"};
  for (const ContainerState& c : pod.containers) {
    if (c.state == "waiting" && kBlocked.count(c.reason)) {
      return absl::StrCat("container ", c.name, ": ", c.reason,
                          c.message.empty() ? "" : absl::StrCat(": ", c.message));
    }
  }
  if (!pod.unschedulable.empty()) return absl::StrCat("Unschedulable: ", pod.unschedulable);
  return std::nullopt;
}

std::optional<std::string> StartWatch::Update(const std::vector<PodState>& pods,
                                              Clock::time_point now) {
  std::map<std::string, Clock::time_point> still;
  std::optional<std::string> verdict;
  for (const PodState& pod : pods) {
    const std::optional<std::string> blocker = StartBlocker(pod);
    if (!blocker) continue;
    const auto it = since_.find(pod.name);
    const Clock::time_point since = it != since_.end() ? it->second : now;
    still[pod.name] = since;
    if (!verdict && now - since >= limit_) {
      verdict = absl::StrCat(pod.service, " (pod ", pod.name, ") never started: ", *blocker);
    }
  }
  since_ = std::move(still);
  return verdict;
}

std::vector<std::string> PodFailures(const std::vector<PodState>& pods) {
  std::vector<std::string> failures;
  for (const PodState& pod : pods) {
    const std::string who = absl::StrCat(pod.service, " (pod ", pod.name, ")");
    bool named = false;
    for (const ContainerState& c : pod.containers) {
      if (c.state != "terminated" || (c.exit_code == 0 && c.reason == "Completed")) continue;
      std::string what =
          c.exit_code != 0 ? absl::StrCat("exited with code ", c.exit_code) : std::string("ended");
      if (!c.reason.empty()) absl::StrAppend(&what, " (", c.reason, ")");
      if (!c.message.empty()) absl::StrAppend(&what, ": ", c.message);
      failures.push_back(
          absl::StrCat(who, ": ", c.init ? "init container " : "container ", c.name, " ", what));
      named = true;
    }
    if (!named && pod.phase == "Failed") failures.push_back(absl::StrCat(who, ": failed"));
  }
  return failures;
}

std::string Progress(const JobState& job, const std::vector<PodState>& pods) {
  int total = 0, ready = 0;
  std::vector<std::string> waiting;
  for (const PodState& p : pods) {
    if (p.deleting || p.phase == "Succeeded") continue;
    ++total;
    if (p.ready) {
      ++ready;
    } else {
      waiting.push_back(absl::StrCat(p.service, " ", Brief(p)));
    }
  }
  constexpr size_t kShown = 4;
  std::string line = absl::StrCat(DescribeJob(job), "; pods ready ", ready, "/", total);
  if (!waiting.empty()) {
    const size_t shown = std::min(waiting.size(), kShown);
    absl::StrAppend(
        &line, "; ",
        absl::StrJoin(waiting.begin(), waiting.begin() + static_cast<long>(shown), ", "));
    if (waiting.size() > shown) absl::StrAppend(&line, ", +", waiting.size() - shown, " more");
  }
  return line;
}

}  // namespace strata
