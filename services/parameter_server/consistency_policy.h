// The seam between a partition's storage and its consistency mode. PartitionStore owns the
// tensors, versions, SGD and the waiting; a ConsistencyPolicy only decides: what to do with a
// push (apply it now, gather it into a round, hold the pusher, refuse it), whether a worker may
// read the model yet, what a held caller waits for, and the base learning rate of an update.
// ASP, BSP, SSP and the PDP round are one small file each in consistency/; a new mode is a new file
// there plus one line in the name table and the factory (consistency_policy.cc).
//
// Threading: a policy is not synchronised on its own. The store calls it only with its lock held,
// so a policy may keep state (BSP's round) without a lock of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/types/span.h>

#include "services/common/config/resolved_job.h"
#include "strata/v1/job.pb.h"

namespace strata {

// The modes are v1::Consistency, spelled ("asp", "bsp", "ssp", "pdp", "apdp") where job.proto
// declares them (Spelled, services/common/config/job_keys.h).

struct ConsistencyConfig {
  int workers = 1;
  int staleness = 3;      // SSP: how many clocks a worker may run ahead of the slowest one
  double lr = 0.1;        // training.lr: the rate of one update over the global batch (BSP)
  double lr_scale = 1.0;  // ASP/SSP apply each worker's push on its own, at lr * lr_scale
};

// What a push says about itself (from the PushHeader).
struct PushMeta {
  int worker = 0;
  int64_t version = 0;  // the model version the gradients were computed on
  int64_t clock = 0;    // the worker's own step counter (informational)
  int64_t samples = 0;
  double lr = 0;  // the rate the worker asks for (before the schedule); 0: the server's own
};

// The store's progress as a policy sees it, read under the store's lock.
struct PartitionProgress {
  int64_t version = 0;               // updates applied to the model
  absl::Span<const int64_t> clocks;  // accepted pushes per worker since the last load
};

enum class PushAction {
  kApply,       // update the model with this push alone, now
  kAccumulate,  // hand it to the policy's round (Accumulate); the store applies what it yields
  kWait,        // hold the pusher (bounded by its deadline) and decide again when state changes
  kRefuse,      // INVALID_ARGUMENT with `refusal` as the message
};

struct PushDecision {
  PushAction action = PushAction::kApply;
  std::string refusal;  // kRefuse only
};

// One update made of several pushes, for the store to apply like a single push.
struct CombinedUpdate {
  // Gradients then buffers, one value per float of the layout. Owned by the policy; valid until
  // its next call.
  const float* values = nullptr;
  int64_t samples = 0;
  double requested_lr = 0;  // as PushMeta::lr
};

class ConsistencyPolicy {
 public:
  virtual ~ConsistencyPolicy() = default;

  virtual v1::Consistency mode() const = 0;

  // A model of `floats` values (gradients then buffers) was loaded: anything gathered before
  // belongs to the old model and is dropped.
  virtual void Reset(size_t floats) { (void)floats; }

  // Asked for every push before it is counted; asked again each time the store's state changes
  // while the answer is kWait.
  virtual PushDecision DecidePush(const PushMeta& push,
                                  const PartitionProgress& progress) const = 0;
  // What a push held by kWait waits for (the text of its DEADLINE_EXCEEDED).
  virtual std::string PushWaitText(const PushMeta& push, const PartitionProgress& progress) const;

  // For pushes decided kAccumulate, after the store counted them: adds `values` (`floats` of
  // them) to the round. Returns the combined update once the round is complete, else nullopt.
  virtual absl::StatusOr<std::optional<CombinedUpdate>> Accumulate(const PushMeta& push,
                                                                   const float* values,
                                                                   size_t floats);

  // Whether `worker` (>= 0; observers are never held) may read the model now.
  virtual bool MayRead(int worker, const PartitionProgress& progress) const = 0;
  // What a pull held by MayRead (or by `min_version`) waits for.
  virtual std::string ReadWaitText(int worker, int64_t min_version,
                                   const PartitionProgress& progress) const;

  // The rate an update is applied at, before the schedule, when its pushes ask for none.
  virtual double BaseLearningRate() const = 0;
};

// The text of a pull that waits only for a version (ASP, and observers in every mode).
std::string VersionWaitText(int worker, int64_t min_version, int64_t version);

std::unique_ptr<ConsistencyPolicy> MakeConsistencyPolicy(v1::Consistency mode,
                                                         const ConsistencyConfig& config);

}  // namespace strata
