// OUT/report.html of a sweep: one self-contained file (inline CSS and SVG, no script, nothing
// fetched):
//  - validation accuracy against wall time, every run a thin line, one colour per cell;
//  - point-and-interval charts of final accuracy, wall time, time to the target and the switch
//    epoch: one row per cell with each run as a ring, the mean as a dot and its t-based 95%
//    interval as a bar, on an axis fitted to the data (not from zero, so that 0.855 and 0.863 do
//    not look equal), the baseline cell named in bold with its mean as a dashed line;
//  - the summary, the variance comparison and the runs as tables, every interval written as
//    numbers or with the reason there is none ("n = 1: no interval").
// The charts' common pieces (legend, ticks at round numbers, line chart) are
// orchestrator/record/report_chart.h's, so both reports read alike.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/sweep/sweep_results.h"
#include "orchestrator/sweep/sweep_spec.h"

namespace strata::sweep {

std::string RenderSweepReportHtml(const SweepSpec& spec, const std::vector<RunResult>& results,
                                  const SweepSummary& summary);

// The 95% interval of a cell's mean, as the summary table writes it: "0.781 to 0.794", or why
// there is none ("n = 1: no interval", "no runs").
std::string MeanIntervalText(const CellMetric& row);

// The bootstrap interval of a variance ratio as the report writes it: "0.012 to 4.56", "0 to
// infinity" with the reason an end is unbounded, or why there is no interval at all
// ("n = 1 in ps: no interval").
std::string BootstrapIntervalText(const VarianceComparison& v);

}  // namespace strata::sweep
