#include "orchestrator/record/run_record.h"

#include <array>
#include <utility>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"

namespace strata {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<RunEvent, const char*>, 24> kEventNames = {{
    {RunEvent::kRunStarted, "run_started"},
    {RunEvent::kResumed, "resumed"},
    {RunEvent::kLaunched, "launched"},
    {RunEvent::kShardsWritten, "shards_written"},
    {RunEvent::kListening, "listening"},
    {RunEvent::kStraggler, "straggler"},
    {RunEvent::kStragglerNotApplied, "straggler_not_applied"},
    {RunEvent::kTrainingStarted, "training_started"},
    {RunEvent::kEvaluationFailed, "evaluation_failed"},
    {RunEvent::kSwitchRule, "switch_rule"},
    {RunEvent::kSwitchRequestIgnored, "switch_request_ignored"},
    {RunEvent::kSwitchDecided, "switch_decided"},
    {RunEvent::kSwitchSkipped, "switch_skipped"},
    {RunEvent::kSwitchFailed, "switch_failed"},
    {RunEvent::kSwitchDone, "switch_done"},
    {RunEvent::kTrainingFinished, "training_finished"},
    {RunEvent::kProcessExited, "process_exited"},
    {RunEvent::kRestart, "restart"},
    {RunEvent::kRejoined, "rejoined"},
    {RunEvent::kProcessesEnded, "processes_ended"},
    {RunEvent::kRunFailed, "run_failed"},
    {RunEvent::kRunFinished, "run_finished"},
    {RunEvent::kDriftDetected, "drift_detected"},
    {RunEvent::kServerLinks, "server_links"},
}};

// The keys every event line carries.
constexpr char kEventKey[] = "event";
constexpr char kTimeKey[] = "time";
constexpr char kWallKey[] = "wall_s";

std::optional<double> OptionalNumber(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

const char* RunEventName(RunEvent event) {
  for (const auto& [e, name] : kEventNames) {
    if (e == event) return name;
  }
  return "unknown";
}

std::optional<RunEvent> RunEventOf(const json& line) {
  if (!line.is_object()) return std::nullopt;
  const std::string name = line.value(kEventKey, "");
  for (const auto& [e, n] : kEventNames) {
    if (name == n) return e;
  }
  return std::nullopt;
}

json HandoverVerification::ToJson() const {
  json j = {{"weights_equal", weights_equal},
            {"workers_max_abs_diff", workers_max_abs_diff},
            {"checked_by", checked_by}};
  if (error) {
    j["error"] = *error;
    return j;
  }
  j["tensors_compared"] = tensors_compared;
  j["tensors_differing"] = tensors_differing;
  j["tensors_missing"] = tensors_missing;
  j["raced_with_a_push"] = raced_with_a_push;
  if (!differing.empty()) j["differing"] = differing;
  return j;
}

json SwitchDecidedEvent::ToJson() const {
  json j = {{"trigger", TriggerKindName(trigger.kind)},
            {"epoch", trigger.epoch},
            {"reason", trigger.reason},
            {"at_step", at_step},
            {kWallKey, wall_s}};
  if (trigger.target_step) j["target_step"] = *trigger.target_step;
  if (const auto& e = trigger.empirical) {
    j["s_percent"] = e->s_percent;
    j["threshold_percent"] = e->threshold_percent;
    j["window"] = e->window;
    j["val_losses"] = e->val_losses;
  }
  if (const auto& a = trigger.at_fraction) {
    j["at_fraction"] = a->at_fraction;
    j["switch_epoch"] = a->switch_epoch;
  }
  return j;
}

SwitchDecidedRecord SwitchDecidedRecord::FromJson(const json& line) {
  SwitchDecidedRecord r;
  r.trigger = line.value("trigger", "");
  r.epoch = line.value("epoch", 0);
  r.reason = line.value("reason", "");
  return r;
}

json SwitchSkippedEvent::ToJson() const {
  return {{"reason", reason}, {"at_step", at_step}, {"last_step", last_step}};
}

json SwitchFailedEvent::ToJson() const {
  json j = {{"error", error}, {"process", process}};
  if (verification) {
    j["reason"] = "handover_mismatch";
    j["verification"] = verification->ToJson();
  }
  return j;
}

json SwitchDoneEvent::ToJson() const {
  return {{"at_step", at_step},
          {"requested_at_step", requested_at_step},
          {"epoch", epoch.value_or(0)},
          {"handover_s", handover_s.value_or(0)},
          {"checkpoint", checkpoint},
          {"checkpoint_s", checkpoint_s},
          {"load_s", load_s},
          {"resume_s", resume_s},
          {kWallKey, wall_s.value_or(0)},
          {"verification", verification.ToJson()}};
}

SwitchDoneEvent SwitchDoneEvent::FromJson(const json& line) {
  SwitchDoneEvent e;
  e.at_step = line.value("at_step", int64_t{0});
  e.epoch = OptionalNumber(line, "epoch");
  e.handover_s = OptionalNumber(line, "handover_s");
  e.wall_s = OptionalNumber(line, kWallKey);
  return e;
}

json RunFailedEvent::ToJson() const {
  return {{"state", state}, {"error", error}, {"process", NullIfEmpty(process)}};
}

RunFailedEvent RunFailedEvent::FromJson(const json& line) {
  RunFailedEvent e;
  e.state = line.value("state", "");
  e.error = line.value("error", "");
  if (line.contains("process") && line["process"].is_string()) e.process = line["process"];
  return e;
}

absl::StatusOr<std::unique_ptr<RunRecord>> RunRecord::Open(const std::string& run_dir,
                                                           Clock::time_point run_start) {
  const RunPaths paths(run_dir);
  auto events = JsonLinesWriter::Open(paths.events);
  if (!events.ok()) return events.status();
  auto metrics = JsonLinesWriter::Open(paths.metrics);
  if (!metrics.ok()) return metrics.status();
  return std::unique_ptr<RunRecord>(
      new RunRecord(run_dir, run_start, std::move(*events), std::move(*metrics)));
}

void RunRecord::Event(RunEvent event, json fields) {
  fields[kEventKey] = RunEventName(event);
  fields[kTimeKey] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!fields.contains(kWallKey)) {
    fields[kWallKey] = std::chrono::duration<double>(Clock::now() - run_start_).count();
  }
  events_->Write(fields).IgnoreError();  // the run goes on without its diary
}

void RunRecord::WriteStatus(const json& status) {
  WriteFileAtomic(RunPaths(run_dir_).status, status.dump(2) + "\n").IgnoreError();
}

void RunRecord::WriteSummary(const json& summary) {
  WriteFileAtomic(RunPaths(run_dir_).summary, summary.dump(2) + "\n").IgnoreError();
}

}  // namespace strata
