// Where `strata resume RUN_DIR` continues a run that did not finish: its orchestrator was killed
// (the services died with it), or the run was interrupted or failed. Everything is read from what
// the run left in its directory: the record says which phase training was in (events.jsonl: was
// the switch done?) and how far each worker got (status.json, rewritten each second), and the
// checkpoints hold the model: worker 0's ring checkpoint in all-reduce, the servers' own saves
// once the workers push and pull (services/common/base/run_directory.h names both).
// docs/user-guide.md, "Resuming a run", is the user's side of this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "orchestrator/record/run_record.h"
#include "services/common/base/run_directory.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct ResumePoint {
  std::string phase;  // "allreduce" | "ps": what the workers are started in
  // allreduce: the ring checkpoint the workers load and the step it holds; empty and 0 when none
  // was saved yet (the run starts again from the job's seed).
  std::string checkpoint;
  int64_t step = 0;
  // ps: each worker's completed steps as status.json last showed them; the servers' saves hold
  // the model and the sample count, these only place each worker in its epoch.
  std::vector<int64_t> worker_steps;
  // The live switch was done before the run stopped (a switch job in its push/pull phase).
  std::optional<SwitchDoneEvent> switch_done;
  int64_t evaluated_epochs = 0;  // the last epoch metrics.jsonl holds: evaluation goes on after it
  double wall_s = 0;             // the run's clock when it stopped: the resumed run's goes on
  int earlier_resumes = 0;       // `resumed` events already in events.jsonl
  // A switch job stopped during its handover: the servers' saves of a model they never trained
  // on. The run goes on in all-reduce, and these are removed so that no server starts from them.
  std::vector<std::string> stale_server_checkpoints;

  // Every worker's steps at the resume point, by rank (the ring's step, or worker_steps).
  std::vector<int64_t> StepsByRank(int workers) const;
};

// Refused, with what to do, when the run cannot be resumed:
//   NOT_FOUND            no job.yaml (not a run directory);
//   FAILED_PRECONDITION  the run finished, or its orchestrator still runs, or the servers'
//                        saves the push/pull phase needs are missing or incomplete;
//   DATA_LOSS            a checkpoint that does not read back.
absl::StatusOr<ResumePoint> FindResumePoint(const RunPaths& paths, const v1::ResolvedJob& job);

}  // namespace strata
