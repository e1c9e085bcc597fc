#include "orchestrator/run/resume_point.h"

#include "services/common/config/resolved_job.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <nlohmann/json.hpp>

#include "orchestrator/run/control_server.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_paths.h"
#include "services/common/wire/checkpoint.h"

namespace strata {
namespace {

using nlohmann::json;

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

std::vector<int64_t> ResumePoint::StepsByRank(int workers) const {
  std::vector<int64_t> steps(static_cast<size_t>(workers), step);
  if (phase == "ps") {
    for (size_t r = 0; r < steps.size(); ++r)
      steps[r] = r < worker_steps.size() ? worker_steps[r] : 0;
  }
  return steps;
}

absl::StatusOr<ResumePoint> FindResumePoint(const RunPaths& paths, const v1::ResolvedJob& job) {
  if (!Exists(paths.job_yaml)) {
    return absl::NotFoundError(
        absl::StrCat(paths.root, " is not a run directory (no job.yaml): nothing to resume"));
  }
  const json summary = ReadJsonFile(paths.summary);
  if (summary.is_object() && summary.value("state", "") == "succeeded") {
    return absl::FailedPreconditionError(
        absl::StrCat(paths.root,
                     ": the run finished (summary.json says succeeded); nothing to "
                     "resume"));
  }
  const json status = ReadJsonFile(paths.status);
  ResumePoint point;
  if (status.is_object()) {
    const int pid = status.value("orchestrator_pid", 0);
    // Alive: it answers on its control socket. Unknown (no socket, status.json still fresh):
    // taken as running, as two orchestrators on one run directory would corrupt it.
    if (status.value("state", "") == "running" &&
        ProbeOrchestrator(status.value("control_socket", ""), status.value("updated", 0.0)) !=
            OrchestratorLiveness::kGone) {
      return absl::FailedPreconditionError(absl::StrCat(
          paths.root, ": the run is still running (its orchestrator, pid ", pid,
          ", answers or wrote status.json within the last minute); stop it first (Ctrl-C, or "
          "kill ",
          pid, ") and resume it then"));
    }
    point.wall_s = status.value("wall_s", 0.0);
    if (status.contains("workers") && status["workers"].is_array()) {
      for (const json& w : status["workers"]) {
        point.worker_steps.push_back(w.is_object() && w.contains("step") &&
                                             w["step"].is_number_integer()
                                         ? std::max<int64_t>(0, w["step"].get<int64_t>())
                                         : 0);
      }
    }
  }
  if (auto events = ReadJsonLines(paths.events); events.ok()) {
    for (const json& line : *events) {
      if (line.contains("wall_s") && line["wall_s"].is_number()) {
        point.wall_s = std::max(point.wall_s, line["wall_s"].get<double>());
      }
      const std::optional<RunEvent> event = RunEventOf(line);
      if (event == RunEvent::kSwitchDone) point.switch_done = SwitchDoneEvent::FromJson(line);
      if (event == RunEvent::kResumed) ++point.earlier_resumes;
    }
  }
  if (auto metrics = ReadJsonLines(paths.metrics); metrics.ok()) {
    for (const json& m : *metrics) {
      if (m.contains("epoch") && m["epoch"].is_number_integer()) {
        point.evaluated_epochs =
            std::max<int64_t>(point.evaluated_epochs, m["epoch"].get<int64_t>());
      }
    }
  }

  std::vector<std::string> saved, missing;
  if (UsesServers(job)) {
    for (int p = 0; p < job.cluster().parameter_servers(); ++p) {
      (Exists(paths.ServerCheckpoint(p)) ? saved : missing).push_back(paths.ServerCheckpoint(p));
    }
  }
  if (job.strategy().kind() == v1::STRATEGY_KIND_PS || point.switch_done) {
    point.phase = "ps";
    // A ps job stopped before its servers' first save starts from the initial model again; a
    // switch job's servers saved at once when the handover gave them the model.
    if (!missing.empty() && (!saved.empty() || point.switch_done)) {
      return absl::FailedPreconditionError(absl::StrCat(
          paths.root, ": the push/pull phase resumes from every server's own save, and ",
          absl::StrJoin(missing, ", "), " is missing"));
    }
    for (const std::string& path : saved) {
      if (auto c = ReadCheckpoint(path); !c.ok()) {
        return absl::DataLossError(
            absl::StrCat("cannot resume from ", path, ": ", c.status().message()));
      }
    }
    return point;
  }
  point.phase = "allreduce";
  point.stale_server_checkpoints = saved;
  const std::string ring = paths.RingCheckpoint();
  if (Exists(ring)) {
    auto c = ReadCheckpoint(ring);
    if (!c.ok()) {
      return absl::DataLossError(
          absl::StrCat("cannot resume from ", ring, ": ", c.status().message()));
    }
    point.checkpoint = ring;
    point.step = c->step;
  }
  return point;
}

}  // namespace strata
