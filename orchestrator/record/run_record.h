// The run record: what `strata run` writes into the run directory while it runs (events.jsonl,
// metrics.jsonl, status.json, summary.json) and what `strata status`, `strata switch` and
// `strata report` read back. Every event name is spelt once, in RunEvent's table; the events other
// commands read back have typed payloads whose JSON keys are spelt once too (ToJson on the writer's
// side, FromJson on the readers'), so a writer and its readers cannot drift apart.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "orchestrator/record/switch_trigger.h"
#include "services/common/base/metrics.h"

namespace strata {

enum class RunEvent {
  kRunStarted,
  kResumed,  // `strata resume` took the run up again (phase, step, checkpoint, resume)
  kLaunched,
  kShardsWritten,
  kListening,
  kStraggler,
  kStragglerNotApplied,
  kTrainingStarted,
  kEvaluationFailed,
  kSwitchRule,
  kSwitchRequestIgnored,
  kSwitchDecided,
  kSwitchSkipped,
  kSwitchFailed,
  kSwitchDone,
  kTrainingFinished,
  kProcessExited,
  kRestart,   // a dead worker or server started again (process, reason, restart, of)
  kRejoined,  // it trains (worker) or serves (server) again
  kProcessesEnded,
  kRunFailed,
  kRunFinished,
  kDriftDetected,  // a stream replica's drift detector fired (replica, events, error before/after)
  kServerLinks,    // how a worker's tensors travel to each server (process, links), when it changes
};

// The name in events.jsonl ("switch_done").
const char* RunEventName(RunEvent event);
// The event a line of events.jsonl records; nullopt for a name this version does not know.
std::optional<RunEvent> RunEventOf(const nlohmann::json& line);

// How the servers' copy of the model compared with the switch checkpoint after the handover.
struct HandoverVerification {
  bool weights_equal = false;
  std::optional<std::string> error;  // the comparison could not be made
  // What the servers sent: whole tensors, and pieces of a tensor split over them, one each.
  int64_t tensors_compared = 0;
  int64_t tensors_differing = 0;
  // A worker's first push reached a server before the read-back: the servers' copy says nothing,
  // the workers' own comparison decides (checked_by "workers").
  bool raced_with_a_push = false;
  double workers_max_abs_diff = 0;
  std::string checked_by;  // "servers" | "workers"
  // Where the servers' copy differs, as "ps-P: tensor" (at most kMaxDiffering named), and the
  // checkpoint tensors that no server sent back (whole, or some of their rows).
  std::vector<std::string> differing;
  int64_t tensors_missing = 0;

  static constexpr size_t kMaxDiffering = 8;
  nlohmann::json ToJson() const;
};

struct SwitchDecidedEvent {
  SwitchTrigger trigger;
  int64_t at_step = 0;  // the step requested from the workers
  double wall_s = 0;

  nlohmann::json ToJson() const;
};

// What a reader needs of a switch_decided line.
struct SwitchDecidedRecord {
  std::string trigger;
  int64_t epoch = 0;
  std::string reason;
  static SwitchDecidedRecord FromJson(const nlohmann::json& line);
};

struct SwitchSkippedEvent {
  std::string reason;
  int64_t at_step = 0;
  int64_t last_step = 0;
  nlohmann::json ToJson() const;
};

struct SwitchFailedEvent {
  std::string error;
  std::string process;  // empty when the run was interrupted
  // Set when the handover was made but its check failed ("reason": "handover_mismatch").
  std::optional<HandoverVerification> verification;
  nlohmann::json ToJson() const;
};

struct SwitchDoneEvent {
  int64_t at_step = 0;            // the step the workers agreed on
  int64_t requested_at_step = 0;  // the step asked for (a late request moves it on)
  // Optional for readers only: an old or torn line shows "--" rather than a made-up number.
  std::optional<double> epoch, handover_s, wall_s;
  std::string checkpoint;
  double checkpoint_s = 0, load_s = 0, resume_s = 0;
  HandoverVerification verification;

  nlohmann::json ToJson() const;
  // Reads at_step, epoch, handover_s and wall_s (what `status`, `switch` and `report` show).
  static SwitchDoneEvent FromJson(const nlohmann::json& line);
};

struct RunFailedEvent {
  std::string state;  // "failed" | "interrupted"
  std::string error;
  std::string process;  // empty: not one process's fault
  nlohmann::json ToJson() const;
  static RunFailedEvent FromJson(const nlohmann::json& line);
};

// The writer. Events are best effort (the run goes on without its diary); metrics lines are not.
class RunRecord {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (appends to) events.jsonl and metrics.jsonl of `run_dir`. `run_start` is the zero of
  // every event's wall_s.
  static absl::StatusOr<std::unique_ptr<RunRecord>> Open(const std::string& run_dir,
                                                         Clock::time_point run_start);

  // Adds "event", "time" and, unless `fields` has it, "wall_s".
  void Event(RunEvent event, nlohmann::json fields);
  void SwitchDecided(const SwitchDecidedEvent& e) { Event(RunEvent::kSwitchDecided, e.ToJson()); }
  void SwitchSkipped(const SwitchSkippedEvent& e) { Event(RunEvent::kSwitchSkipped, e.ToJson()); }
  void SwitchFailed(const SwitchFailedEvent& e) { Event(RunEvent::kSwitchFailed, e.ToJson()); }
  void SwitchDone(const SwitchDoneEvent& e) { Event(RunEvent::kSwitchDone, e.ToJson()); }
  void RunFailed(const RunFailedEvent& e) { Event(RunEvent::kRunFailed, e.ToJson()); }

  absl::Status Metrics(const nlohmann::json& line) { return metrics_->Write(line); }
  // status.json and summary.json, replaced atomically; best effort like events.
  void WriteStatus(const nlohmann::json& status);
  void WriteSummary(const nlohmann::json& summary);

 private:
  RunRecord(std::string run_dir, Clock::time_point run_start,
            std::unique_ptr<JsonLinesWriter> events, std::unique_ptr<JsonLinesWriter> metrics)
      : run_dir_(std::move(run_dir)),
        run_start_(run_start),
        events_(std::move(events)),
        metrics_(std::move(metrics)) {}

  std::string run_dir_;
  Clock::time_point run_start_;
  std::unique_ptr<JsonLinesWriter> events_, metrics_;
};

}  // namespace strata
