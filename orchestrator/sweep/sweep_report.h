// OUT/report.html of a sweep: inline SVG (no scripts, no network), readable from a file.
//  - validation accuracy against wall time: every run a thin line, one colour per cell;
//  - mean final accuracy and mean wall time per cell, as bars with t-based 95% CI whiskers;
//  - the switch epoch of every run, as dots per cell;
//  - the summary and the variance comparison as tables.
// The run report's chart helper (orchestrator/record/report.cc) draws one thick line per series
// with dots on every point; a sweep needs many thin lines, bars and strip plots, so the few SVG
// primitives are here, in the same visual style.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/sweep/sweep_results.h"
#include "orchestrator/sweep/sweep_spec.h"

namespace strata::sweep {

std::string RenderSweepReportHtml(const SweepSpec& spec, const std::vector<RunResult>& results,
                                  const SweepSummary& summary);

}  // namespace strata::sweep
