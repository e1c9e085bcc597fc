// The parts of report.html that differ for a stream run (strategy.kind stream): no epochs and no
// evaluations, but events. Its summary says how many events the replicas trained, how fast, and
// whether the apply-once and agreement checks held; its charts are the loss and the accuracy
// before training against the events trained, the events trained per second and the broker's
// backlog (lag and pending) against wall time, with every drift detection marked; a table gives
// each replica's counts. Everything comes from metrics.jsonl (one line a second), events.jsonl and
// summary.json as stream_run.cc writes them.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/record/report.h"
#include "orchestrator/record/report_chart.h"

namespace strata {

bool IsStreamRun(const ReportInput& in);

std::vector<std::string> StreamSummarySentences(const ReportInput& in);

// The charts (`by_time`: the markers against wall time the other reports draw too) and the
// replicas' table.
std::string StreamChartsAndReplicas(const ReportInput& in,
                                    const std::vector<ChartMarker>& by_time);

}  // namespace strata
