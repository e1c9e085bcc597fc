// The worker's training thread: waits for Start, trains its shard with one synchroniser at a time
// (synchroniser.h), and carries out what the orchestrator asks meanwhile, at step boundaries: the
// live switch from the ring to the parameter servers, the fall-back to them when the ring breaks
// in a switch job, the wait for a re-formed ring in an all-reduce job, a resumed start. After
// training it serves the RPCs' tasks (GetModel, SaveCheckpoint) until Stop.
//
// It talks to the RPC threads only through WorkerState (worker_service.h), and makes its
// synchronisers only through a SynchroniserFactory: strata-worker's builds them on its ring and
// its partition clients (worker.cc); a test gives fakes whose steps fail as a broken ring's do.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"
#include "services/worker/synchroniser.h"
#include "services/worker/worker.h"
#include "services/worker/worker_metrics.h"
#include "services/worker/worker_service.h"

namespace strata {

// Where the training loop gets its synchronisers and its ring from.
class SynchroniserFactory {
 public:
  virtual ~SynchroniserFactory() = default;

  // Connects the ring to `peers` (every rank's address, by rank). `generation` 0: the ring's
  // first forming; above 0: a ring re-formed after losing a member, whose operations are numbered
  // in that generation (RingAllReduce::Reform).
  virtual absl::Status ConnectRing(const std::vector<std::string>& peers, uint32_t generation) = 0;
  // All-reduce over the connected ring; its Start takes the model of `source_rank`.
  virtual absl::StatusOr<std::unique_ptr<Synchroniser>> AllReduce(int source_rank) = 0;
  // One float summed over the connected ring: nobody passes before every rank got there.
  virtual absl::Status RingBarrier() = 0;
  // Push/pull (or PDP and APDP, as the job's consistency says) with `servers`, by partition;
  // `lr` is the rate the servers apply to this worker's pushes (0: theirs).
  virtual absl::StatusOr<std::unique_ptr<Synchroniser>> PushPull(
      const std::vector<std::string>& servers, const Trainer& trainer, double lr) = 0;
};

class TrainingLoop {
 public:
  // All four are borrowed and must outlive the loop; `metrics` may be null (no figures kept).
  TrainingLoop(const WorkerOptions& options, WorkerState* state, SynchroniserFactory* synchronisers,
               WorkerMetrics* metrics = nullptr);
  ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  // Waits for Start, trains, then serves the posted tasks until Stop. A training error does not
  // end it: it goes into the status (error, finished) for the orchestrator to read.
  void Run(Trainer& trainer);

 private:
  class Runner;  // training_loop.cc
  std::unique_ptr<Runner> runner_;
};

}  // namespace strata
