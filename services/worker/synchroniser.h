// The seam between the training loop and the way replicas agree on a model. The loop computes a
// mini-batch's gradients into trainer.gradient_data() and calls Step(); when Step() returns, the
// trainer's parameters (and float buffers) are the model for the next step. The loop does not
// know which synchroniser it has: ring all-reduce or parameter-server push/pull.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"

namespace strata {

struct StepContext {
  int64_t epoch = 0;  // 0-based epoch of this worker
  int64_t step = 0;   // steps completed by this worker since the start (its clock)
  int64_t batch_examples = 0;
  double loss = 0;  // the batch's mean training loss
  // This worker's vote to switch strategy after this step (it holds a switch request due now).
  bool ready_to_switch = false;
};

struct StepOutcome {
  // Every replica voted ready_to_switch: all of them switch after this step, together.
  bool all_ready_to_switch = false;
  // The job's sample budget is spent (parameter servers with a budget): stop training, however
  // many passes over the shard that left undone.
  bool budget_spent = false;
  // The synchroniser's replicas share a job-wide sample budget: training continues past the
  // spec's epochs until budget_spent.
  bool has_budget = false;
};

class Synchroniser {
 public:
  virtual ~Synchroniser() = default;
  virtual std::string name() const = 0;
  // Before the first step of this synchroniser (also right after a switch): agree on the
  // starting model (all-reduce: every replica already holds the same one; push/pull: pull it).
  virtual absl::Status Start(Trainer& trainer) = 0;
  // After the gradients of one step are in trainer.gradient_data(). The switch vote travels with
  // the step's exchange, so replicas that must switch together (a ring) agree on the step.
  // OUT_OF_RANGE means what the step had to send cannot be sent at all (a gradient beyond the
  // 16-bit ring's range): the training loop then stops with it instead of treating the failure
  // as a lost peer.
  virtual absl::StatusOr<StepOutcome> Step(Trainer& trainer, const StepContext& context) = 0;
  // When training ends: completes whatever exchange is still travelling (a pipelined
  // synchroniser) so that the trainer holds the latest model.
  virtual absl::Status Drain(Trainer& trainer) { return absl::OkStatus(); }
  // Once Start has run (and again after each step, since a shared region is decided by the
  // first exchange): how the tensors travel to each server, one line per server
  // (PartitionClients::LinkPaths); empty for a synchroniser without servers.
  virtual std::vector<std::string> ServerLinks() const { return {}; }
  // Moves whenever ServerLinks() may have (PartitionLink::path_stamp); 0 without servers.
  virtual uint64_t ServerLinksStamp() const { return 0; }
};

}  // namespace strata
