#include "orchestrator/sweep/sweep_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

namespace strata::sweep {

std::vector<PlannedRun> PlanRuns(const SweepSpec& spec, const std::string& out_dir) {
  // Seed by seed, every cell once per seed: the cells alternate, so that a change in the
  // machine's load during a long sweep falls on every cell alike instead of on the cells run last.
  std::vector<PlannedRun> runs;
  for (uint64_t seed : spec.seeds) {
    for (size_t c = 0; c < spec.cells.size(); ++c) {
      const Cell& cell = spec.cells[c];
      PlannedRun run;
      run.cell = c;
      run.seed = seed;
      run.name = absl::StrCat(cell.name, "/seed-", seed);
      run.dir = absl::StrCat(out_dir, "/runs/", cell.name, "/seed-", seed);
      for (const Override& o : cell.overrides) run.assignments.push_back(o.Assignment());
      run.assignments.push_back(absl::StrCat("training.seed=", seed));
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

uint64_t Fingerprint(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

nlohmann::json RunRecordJson(const PlannedRun& run, const std::string& base_path,
                             uint64_t base_fingerprint, bool complete) {
  return {{"base", base_path},
          {"base_fingerprint", absl::StrFormat("%016x", base_fingerprint)},
          {"assignments", run.assignments},
          {"complete", complete}};
}

ResumeDecision DecideResume(const RunDirState& found, const nlohmann::json& planned) {
  if (!found.exists) return {ResumeAction::kRun, ""};
  if (!found.record || !found.record->is_object()) {
    return {ResumeAction::kRerun, "holds no record of a sweep run: cleared and run again"};
  }
  const nlohmann::json& r = *found.record;
  if (r.value("assignments", nlohmann::json()) != planned["assignments"]) {
    return {ResumeAction::kRerun, "was run with other settings: cleared and run again"};
  }
  if (r.value("base_fingerprint", std::string()) != planned["base_fingerprint"]) {
    return {ResumeAction::kRerun, "was run from another version of the base job: run again"};
  }
  if (!r.value("complete", false)) {
    const std::string state = found.summary_state.value_or("unfinished");
    return {ResumeAction::kRerun, absl::StrCat("was ", state == "running" ? "interrupted" : state,
                                               " earlier: run again from scratch")};
  }
  if (found.summary_state != "succeeded") {
    return {ResumeAction::kRerun,
            absl::StrCat("has no succeeded summary.json (", found.summary_state.value_or("none"),
                         "): run again")};
  }
  return {ResumeAction::kSkip, "finished earlier: kept"};
}

std::optional<double> EstimateRemainingSeconds(const std::vector<double>& finished_s,
                                               int not_started,
                                               const std::vector<double>& running_elapsed_s,
                                               int parallel) {
  if (finished_s.empty()) return std::nullopt;
  const double mean =
      std::accumulate(finished_s.begin(), finished_s.end(), 0.0) / finished_s.size();
  double work = mean * std::max(0, not_started);
  for (double elapsed : running_elapsed_s) work += std::max(0.0, mean - elapsed);
  return work / std::max(1, parallel);
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace strata::sweep
