// The runs of a sweep and what to do with each when the sweep is started (again): every cell x
// seed is one `strata run` into OUT/runs/<cell>/seed-<s>/. A run directory carries sweep-run.json,
// written before its run starts and marked complete only after the run succeeded, so that a
// sweep interrupted at any moment resumes exactly: finished runs are kept, anything else is run
// again from scratch. Pure functions; the runner (sweep_runner.h) does the I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/sweep/sweep_spec.h"

namespace strata::sweep {

struct PlannedRun {
  size_t cell = 0;  // index into SweepSpec::cells
  uint64_t seed = 0;
  std::string name;  // "<cell>/seed-<s>", for the console
  std::string dir;   // OUT/runs/<cell>/seed-<s>
  // The `--set` assignments of `strata run`: the cell's overrides, then training.seed.
  std::vector<std::string> assignments;
};

// Every run of the sweep, seed by seed and within a seed cell by cell (cells alternate).
std::vector<PlannedRun> PlanRuns(const SweepSpec& spec, const std::string& out_dir);

// FNV-1a, 64 bits: a fingerprint of the base job's text, so that a run made from an older version
// of the base file is not taken for a finished run of this one.
uint64_t Fingerprint(std::string_view text);

// The file in each run directory that says which run it holds and whether it finished.
inline constexpr const char* kRunRecordFile = "sweep-run.json";

// The contents of sweep-run.json for `run`.
nlohmann::json RunRecordJson(const PlannedRun& run, const std::string& base_path,
                             uint64_t base_fingerprint, bool complete);

// What the runner found in a run directory.
struct RunDirState {
  bool exists = false;                       // the directory is there (and not empty)
  std::optional<nlohmann::json> record;      // sweep-run.json, if readable
  std::optional<std::string> summary_state;  // summary.json's "state", if readable
};

enum class ResumeAction {
  kRun,    // nothing there: run it
  kSkip,   // a finished run of exactly this cell and seed: keep it
  kRerun,  // something else is there (interrupted, failed, other settings): clear it, run again
};

struct ResumeDecision {
  ResumeAction action = ResumeAction::kRun;
  std::string reason;  // for the console, empty for kRun
};

// `planned` is RunRecordJson(run, ..., complete=true) for the run the sweep wants there.
ResumeDecision DecideResume(const RunDirState& found, const nlohmann::json& planned);

// Seconds until the sweep ends, from the mean duration of the runs finished so far: the runs
// not started yet each take the mean, a running one the rest of the mean (at least 0), and
// `parallel` run at a time. nullopt until a run has finished.
std::optional<double> EstimateRemainingSeconds(const std::vector<double>& finished_s,
                                               int not_started,
                                               const std::vector<double>& running_elapsed_s,
                                               int parallel);

// "1:05" / "1:02:03".
std::string FormatDuration(double seconds);

}  // namespace strata::sweep
