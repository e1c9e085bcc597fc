// One parameter server's share of the model and the mechanism around it: the tensors and their
// momentum, the version, SGD with momentum on the server (services/common/ml/sgd.h), progress
// counters, checkpoints, and the bounded waits. What a push does and when a worker may read is
// not decided here: the store asks its ConsistencyPolicy (consistency_policy.h) under its lock.
// No gRPC and no LibTorch: the service feeds it decoded pushes, and tests drive it directly.
//
// Concurrency: one mutex guards the store and its policy; a push is decoded into a PushStaging
// without it. Every wait is bounded by the caller's deadline and ends early on cancellation, on a
// reload (ABORTED) or on Shutdown (UNAVAILABLE).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/sgd.h"
#include "services/common/wire/checkpoint.h"
#include "services/parameter_server/consistency_policy.h"
#include "services/parameter_server/push_staging.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct PartitionConfig {
  int partition = 0;
  int partitions = 1;
  int workers = 1;
  v1::Consistency consistency = v1::CONSISTENCY_ASP;
  int staleness = 3;  // SSP only
  double lr = 0.1;    // training.lr (BSP applies it to the averaged gradient)
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::vector<int32_t> lr_milestones;  // epochs after which lr *= lr_gamma
  double lr_gamma = 0.1;
  double lr_scale = 1.0;       // ASP/SSP: each push is applied with lr * lr_scale
  int64_t train_examples = 1;  // global epoch = samples / train_examples
  // The job's budget of samples applied, all workers together (epochs x train_examples); once
  // reached, pushes are discarded and every wait ends, so workers learn from their next reply
  // that the job is done. 0: no budget (each worker decides when it has trained enough).
  int64_t sample_budget = 0;
  // strategy.ps_split: a whole-model checkpoint is cut by the plan of partition_plan.h with
  // large tensors split into pieces (the workers compute the same plan).
  bool split_tensors = true;
};

// Partition `partition` of a resolved job, given the training-set size the sharder counted. The
// sample budget is the job's: training.epochs passes over the training set, all workers together
// (docs/protocol.md, "Sample budget").
absl::StatusOr<PartitionConfig> PartitionConfigFor(const v1::ResolvedJob& job, int partition,
                                                   int64_t train_examples);

// The part of the partition's configuration its consistency policy reads.
ConsistencyConfig ConsistencyConfigOf(const PartitionConfig& config);

// Buckets of the staleness histogram; the last one counts "this many versions or more".
inline constexpr int kStalenessBuckets = 16;

struct WaitOptions {
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  std::function<bool()> cancelled;  // polled while waiting; may be empty
};

struct PartitionStatus {
  bool loaded = false;
  int64_t version = 0, pushes = 0, rejected_pushes = 0, samples = 0, completed_epochs = 0;
  int64_t waited_pulls = 0, max_clock_gap = 0;
  int64_t waiting_now = 0;  // pulls and pushes the consistency rule holds at this moment
  int64_t sample_budget = 0, discarded_pushes = 0;
  double global_epoch = 0, lr = 0;
  size_t bytes = 0;
  std::vector<int64_t> staleness_histogram, clocks;
  // The staleness of each push as this server saw the versions it handed out, not as the push's
  // header claims (kStalenessBuckets each; pushes before the pushing worker's first pull since
  // the load are not counted). low: the version the push met minus the last version handed to
  // that worker before it, so no push was computed on a newer model than that. high: minus the
  // version the worker had been handed as of its previous push (its first pull, for the first),
  // so none of the push's points can have been computed on an older model than that.
  std::vector<int64_t> served_staleness_low, served_staleness_high;
  std::vector<std::string> tensors;
};

struct PullSnapshot {
  int64_t version = 0;
  double global_epoch = 0;
  int64_t samples = 0, sample_budget = 0;
  std::shared_ptr<const PartitionLayout> layout;
  // The model at `version`, shared rather than copied: a published model is not written while a
  // pull holds it, so a pull encodes it outside the lock while the next update goes into another
  // buffer (an update writes in place only when no pull holds the model).
  std::shared_ptr<const std::vector<float>> values;
};

class PartitionStore {
 public:
  // `config.consistency` is informational here (checkpoints record it); `policy` decides.
  PartitionStore(PartitionConfig config, std::unique_ptr<ConsistencyPolicy> policy);

  const PartitionConfig& config() const { return config_; }

  // Accepts the whole model written by a worker (Trainer::ToCheckpoint: the partition plan over
  // its kParameter then kBuffer entries picks this server's tensors) or a partition written by
  // SaveCheckpoint. Momentum entries continue the optimizer. Validates fully before changing
  // anything; gathered rounds and waiting calls are aborted.
  absl::Status Load(const Checkpoint& checkpoint, const std::string& origin);
  Checkpoint ToCheckpoint() const;  // FAILED_PRECONDITION-free: empty when not loaded
  bool loaded() const;

  // FAILED_PRECONDITION when nothing is loaded yet.
  absl::StatusOr<std::unique_ptr<PushStaging>> NewStaging() const;
  // The tensors held now; a staging made for an older layout is refused by Push (ABORTED).
  absl::StatusOr<std::shared_ptr<const PartitionLayout>> CurrentLayout() const;

  // Counts the push and applies it, or hands it to the policy's round, as the policy decides
  // (waiting while it says so); once the sample budget is spent the push is discarded instead
  // (counted in discarded_pushes). Returns the version the pusher must wait for before its pull
  // reflects the push: the new version when applied, the round's end when gathered.
  absl::StatusOr<int64_t> Push(const PushMeta& meta, const PushStaging& staging,
                               const WaitOptions& wait);

  // Waits until the model is at `min_version` and the policy lets `worker` read (worker -1 is
  // an observer, the evaluator or a checkpoint reader, and only waits for the version), then
  // copies the model. Once the sample budget is spent nothing waits: the model is final.
  absl::StatusOr<PullSnapshot> Pull(int worker, int64_t min_version, const WaitOptions& wait);

  // Blocks until the completed-epoch count differs from `known_completed_epochs`, the server
  // stops, or `max_wait` passes; true unless it timed out.
  bool WaitForProgress(int64_t known_completed_epochs, std::chrono::milliseconds max_wait);

  void CountRejected();
  PartitionStatus Status() const;

  // Ends every wait with UNAVAILABLE; later calls fail the same way.
  void Shutdown();
  bool stopping() const;

 private:
  // Everything below runs with mu_ held.
  absl::Status CheckUsable() const;
  PartitionProgress Progress() const { return {version_, clocks_}; }
  // Waits on cv_ until ready() holds; `what` names what it waits for in DEADLINE_EXCEEDED.
  absl::Status WaitUntil(std::unique_lock<std::mutex>& lock, const WaitOptions& wait,
                         const std::function<bool()>& ready,
                         const std::function<std::string()>& what, uint64_t generation);
  double GlobalEpoch() const;
  bool BudgetSpent() const {
    return config_.sample_budget > 0 && samples_ >= config_.sample_budget;
  }
  // `requested_lr` > 0 replaces the policy's base rate (a push's own); the schedule applies.
  SgdOptions SgdForNextUpdate(double requested_lr = 0) const;
  // One SGD step with `update` (gradients then buffers), then a new version; INVALID_ARGUMENT
  // and no change at all if the step would leave a weight or momentum non-finite. `update_bound`
  // bounds the update's magnitudes (infinity: unknown); with it, a step that provably cannot
  // overflow runs in place when no pull holds the published model, which saves a stream of
  // memory traffic (docs/benchmarks.md).
  absl::Status ApplyUpdate(const float* update, int64_t samples, double requested_lr,
                           double update_bound = std::numeric_limits<double>::infinity());
  // No pull holds the published model: only values_ and model_buffers_ refer to it.
  bool PublishedModelIsFree() const;

  const PartitionConfig config_;
  const std::unique_ptr<ConsistencyPolicy> policy_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const PartitionLayout> layout_;  // null until loaded
  // The published model (see PullSnapshot::values), one of `model_buffers_`: the buffers models
  // are written into, each reused once neither values_ nor a pull holds it (use count 1).
  std::shared_ptr<std::vector<float>> values_;
  std::vector<std::shared_ptr<std::vector<float>>> model_buffers_;
  std::vector<float> velocity_, scratch_velocity_;  // scratch: ApplyUpdate's next momentum
  // Upper bounds on |weight| and |momentum| over the parameters (infinity: unknown), kept from
  // step to step without a pass over the model (SgdStepCannotOverflow).
  double weight_bound_ = std::numeric_limits<double>::infinity();
  double velocity_bound_ = std::numeric_limits<double>::infinity();
  int64_t version_ = 0, pushes_ = 0, rejected_ = 0, samples_ = 0;
  int64_t waited_pulls_ = 0, max_clock_gap_ = 0, discarded_pushes_ = 0;
  int64_t waiting_now_ = 0;
  double last_lr_ = -1;  // rate of the last update applied; -1 before any
  std::vector<int64_t> staleness_histogram_;
  std::vector<int64_t> clocks_;  // accepted pushes per worker since the load
  // Per worker since the load (-1: none yet): the version of the last snapshot handed to it, and
  // the one it had been handed as of its previous accepted push (its first, before any push).
  std::vector<int64_t> last_handed_, handed_at_last_push_;
  std::vector<int64_t> served_low_, served_high_;  // PartitionStatus::served_staleness_*
  bool shutdown_ = false;
  uint64_t next_generation_ = 1;
};

}  // namespace strata
