// What a sweep found: one RunResult per run (from its summary.json and metrics.jsonl), then the
// tables of OUT/results.csv (one row per run) and OUT/summary.csv (per cell and metric: n, mean,
// sample sd, min, max, ratio of means to the baseline cell; for final_val_acc also the variance
// comparison with the baseline), and the same summary as text for the console. Pure functions of
// the parsed files, so every number is unit-tested.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/sweep/sweep_plan.h"
#include "orchestrator/sweep/sweep_spec.h"
#include "orchestrator/sweep/sweep_stats.h"

namespace strata::sweep {

struct RunResult {
  std::string cell;
  uint64_t seed = 0;
  // summary.json's state (succeeded | failed | interrupted), "incomplete" for a directory without
  // one, "pending" for a run never started.
  std::string state;
  std::optional<double> wall_s, time_to_target_s, final_val_acc, final_val_loss, switch_epoch,
      samples_per_s_allreduce, samples_per_s_ps;
  // A stream job's (strategy stream): its events/s, its accuracy before training, and, with a
  // drift produced, the events it took to recover (summary.json's drift_recovery; absent when it
  // never did).
  bool stream = false;
  bool drift = false;  // its summary reads a recovery (the job's producer made a drift)
  std::optional<double> events_per_s, prequential_accuracy, events_to_recover;
  std::vector<std::pair<double, double>> val_acc_by_wall_s;  // from metrics.jsonl
};

// `summary` is summary.json (null when there is none); `metrics` the lines of metrics.jsonl.
RunResult ResultFromRunFiles(const std::string& cell, uint64_t seed, const nlohmann::json& summary,
                             const std::vector<nlohmann::json>& metrics,
                             std::optional<double> target_accuracy);

// The wall_s of the first evaluation with val_acc >= target (seconds since the run started,
// start-up included), or nullopt if none reached it.
std::optional<double> TimeToTarget(const std::vector<nlohmann::json>& metrics, double target);

// The metrics summarised, in column order of results.csv: the wall time; those of epoch-based
// jobs unless every run that wrote a summary is a stream job's; the stream's when some run is
// (a stream job has no validation set, epochs or switch).
std::vector<std::string> MetricNames(const std::vector<RunResult>& results);
std::optional<double> MetricValue(const RunResult& r, const std::string& metric);

std::string ResultsCsv(const SweepSpec& spec, const std::vector<RunResult>& results);

struct CellMetric {
  std::string cell, metric;
  Describe stats;                           // of the succeeded runs that have the metric
  std::optional<double> ratio_to_baseline;  // mean / baseline's mean
  double ci95_half_width = 0;               // t-based, NaN for n < 2
};

// A cell's run-to-run variance of one metric against the baseline's.
struct VarianceComparison {
  std::string cell, baseline, metric;
  int n = 0, n_baseline = 0;
  std::optional<VarianceRatio> ratio;  // Var(cell) / Var(baseline), bootstrap CI
  std::optional<BrownForsythe> test;
  bool significant = false;  // p < 0.05 and the interval excludes 1
  bool few_runs = false;     // fewer than kVarianceMinRuns in either arm
  std::string verdict;       // plain language, one line
};

// Below this many runs per arm a variance comparison is flagged: see docs/user-guide.md, "Sweeps".
inline constexpr int kVarianceMinRuns = 10;

struct SweepSummary {
  std::vector<std::string> metrics;          // MetricNames of the results
  std::vector<CellMetric> rows;              // cells in order, metrics in `metrics` order
  // Of the accuracy (final_val_acc; a stream sweep's prequential_accuracy), each cell but the
  // baseline.
  std::vector<VarianceComparison> variance;
};

SweepSummary Summarize(const SweepSpec& spec, const std::vector<RunResult>& results,
                       const BootstrapOptions& bootstrap = {});

std::string SummaryCsv(const SweepSummary& summary);
// The console's table: one block per metric, then the variance comparisons.
std::string SummaryText(const SweepSummary& summary);

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string CsvField(const std::string& s);

}  // namespace strata::sweep
