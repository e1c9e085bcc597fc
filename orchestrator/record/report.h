// RUN_DIR/report.html: what a person reads about one run, from the run directory's files alone
// (metrics.jsonl, events.jsonl, status.json, summary.json, job.yaml). One self-contained file:
// inline CSS and SVG, no script, nothing fetched. It holds
//  - a summary in words and units ("Switched to parameter servers at epoch 4.0 after 5.82 s,
//    handover 13 ms"), the figures of each worker and how each process ended;
//  - charts: loss and accuracy against epoch and against wall time, and each worker's samples/s
//    against wall time (metrics.jsonl's worker_samples_per_s), with the switch, every `strata
//    resume` and every restart marked;
//  - the timeline of the run's phases and events as a table, and every evaluation.
// While the run goes on the orchestrator rewrites it every kReportRefreshSeconds and the page
// reloads itself at that pace (a meta refresh); the report of a run that has ended has none.
#pragma once

#include <string>
#include <vector>

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

#include "orchestrator/record/report_format.h"

namespace strata {

// How often a running orchestrator rewrites report.html, and how often the page reloads.
inline constexpr int kReportRefreshSeconds = 5;

struct ReportInput {
  std::string title;  // the job's name
  std::string run_dir;
  std::vector<nlohmann::json> metrics;  // metrics.jsonl lines
  std::vector<nlohmann::json> events;   // events.jsonl lines
  nlohmann::json summary;               // summary.json; null while the run is going
  nlohmann::json status;                // status.json; null if there is none
  std::string job_yaml;
  std::string written_at;  // when the report was written, local time ("" to leave it out)
};

std::string RenderReportHtml(const ReportInput& input);

// The run has ended (summary.json, or status.json with a state other than "running"): its
// report no longer reloads itself.
bool RunHasEnded(const ReportInput& input);

// One row of the timeline: seconds since the run started, the phase training was in after the
// event, and what happened, in words.
struct TimelineRow {
  double wall_s = 0;
  std::string phase;
  std::string what;
  std::string event;  // the events.jsonl name(s) it came from, for the row's class
};
// The events in order, consecutive launches and listens folded into one row each; the
// per-epoch switch_rule lines are left to the evaluation table.
std::vector<TimelineRow> Timeline(const std::vector<nlohmann::json>& events,
                                  const nlohmann::json& summary);

// The summary's sentences ("Succeeded in 7.54 s.", "Switched to parameter servers at epoch 4.0
// after 5.82 s, handover 13 ms.") and its table of facts (label, value).
std::vector<std::string> SummarySentences(const ReportInput& input);
std::vector<std::pair<std::string, std::string>> SummaryFacts(const ReportInput& input);

// Reads the run directory's files and writes report.html (also for a run still going).
absl::Status WriteRunReport(const std::string& run_dir);

}  // namespace strata
