// `strata run` on a stream job (strategy.kind stream; docs/user-guide.md, "Stream jobs"): no
// shards, no parameter servers, no evaluator. The run starts a broker of its own when the job
// names none (a private redis-server on a unix socket; the producer then runs as part of the run,
// replaying the job's data set: an outside producer could not reach that broker), launches the
// cluster.workers replicas, prints progress in events about once a second, and when every replica
// has ended writes summary.json: the events produced and trained, the apply-once and agreement
// checks over the replicas' own reports and final models, and the staleness histogram.
#pragma once

#include "orchestrator/lib/local_run.h"
#include "strata/v1/job.pb.h"

namespace strata {

// The process's exit code: 0 when every replica ended well and the checks held, 1 when the run
// failed (the reason on stderr and in events.jsonl), 2 when nothing could be started.
int RunStreamJob(const LocalRunOptions& options, v1::ResolvedJob job, const std::string& run_dir);

}  // namespace strata
