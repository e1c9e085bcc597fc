// One parameter server's share of the model and the rules that update it: SGD with momentum on
// the server (services/common/sgd.h), the consistency mode (ASP, BSP, SSP), progress counting and
// checkpoints. No gRPC and no LibTorch here: the service feeds it decoded pushes, and tests can
// drive it directly.
//
// Concurrency: a push is decoded and validated into a PushStaging without the lock (pushes from
// many workers decode in parallel); only applying it and copying the weights for a pull take the
// lock. Every wait is bounded by the caller's deadline and ends early on cancellation or Stop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/status/statusor.h>

#include "services/common/checkpoint.h"
#include "services/common/job_spec.h"
#include "services/common/sgd.h"
#include "services/common/tensor.h"

namespace strata {

enum class ConsistencyMode { kAsp, kBsp, kSsp };
const char* ConsistencyName(ConsistencyMode mode);
absl::StatusOr<ConsistencyMode> ConsistencyFromName(const std::string& name);

struct PartitionConfig {
  int partition = 0;
  int partitions = 1;
  int workers = 1;
  ConsistencyMode consistency = ConsistencyMode::kAsp;
  int staleness = 3;  // SSP only
  double lr = 0.1;    // training.lr (BSP applies it to the averaged gradient)
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrScheduleSpec lr_schedule;
  double lr_scale = 1.0;       // ASP/SSP: each push is applied with lr * lr_scale
  int64_t train_examples = 1;  // global epoch = samples / train_examples
};

// Buckets of the staleness histogram; the last one counts "this many versions or more".
inline constexpr int kStalenessBuckets = 16;

struct PushMeta {
  int worker = 0;
  int64_t version = 0;  // the model version the gradients were computed on
  int64_t clock = 0;    // the worker's own step counter (informational)
  int64_t samples = 0;
  double lr = 0;  // the rate the worker asks for (before the schedule); 0: the server's own
};

struct WaitOptions {
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  std::function<bool()> cancelled;  // polled while waiting; may be empty
};

class ParameterPartition;

// The tensors this partition holds, in model order (trainable parameters first, then buffers).
struct PartitionLayout {
  struct Entry {
    TensorSpec spec;
    bool is_buffer = false;
    size_t offset = 0;  // in floats, into the partition's value buffer
  };
  std::vector<Entry> entries;
  absl::flat_hash_map<std::string, size_t> index;
  size_t parameter_floats = 0;  // parameters occupy [0, parameter_floats)
  size_t total_floats = 0;
  uint64_t generation = 0;  // changes on every load, so a push decoded before a reload is refused
};

// One push, decoded and checked outside the partition's lock.
class PushStaging {
 public:
  explicit PushStaging(std::shared_ptr<const PartitionLayout> layout);
  // Where an announced tensor's bytes go: refuses unknown names, wrong shape or dtype, repeats.
  absl::StatusOr<void*> Destination(const TensorSpec& spec);
  // After the stream ended: every tensor present, every value finite.
  absl::Status Validate() const;
  size_t total_bytes() const { return layout_->total_floats * sizeof(float); }

 private:
  friend class ParameterPartition;
  std::shared_ptr<const PartitionLayout> layout_;
  std::vector<float> values_;
  std::vector<bool> seen_;
};

struct PartitionStatus {
  bool loaded = false;
  int64_t version = 0, pushes = 0, rejected_pushes = 0, samples = 0, completed_epochs = 0;
  int64_t waited_pulls = 0, max_clock_gap = 0;
  double global_epoch = 0, lr = 0;
  size_t bytes = 0;
  std::vector<int64_t> staleness_histogram, clocks;
  std::vector<std::string> tensors;
};

struct PullSnapshot {
  int64_t version = 0;
  double global_epoch = 0;
  std::shared_ptr<const PartitionLayout> layout;
  std::vector<float> values;
};

class ParameterPartition {
 public:
  explicit ParameterPartition(PartitionConfig config);

  const PartitionConfig& config() const { return config_; }

  // Accepts the whole model written by a worker (Trainer::ToCheckpoint: the partition plan over
  // its kParameter then kBuffer entries picks this server's tensors) or a partition written by
  // SaveCheckpoint. Momentum entries continue the optimizer. Validates fully before changing
  // anything; in-flight BSP rounds and waiting pulls are aborted.
  absl::Status Load(const Checkpoint& checkpoint, const std::string& origin);
  Checkpoint ToCheckpoint() const;  // FAILED_PRECONDITION-free: empty when not loaded
  bool loaded() const;

  // FAILED_PRECONDITION when nothing is loaded yet.
  absl::StatusOr<std::unique_ptr<PushStaging>> NewStaging() const;

  // Applies (ASP/SSP) or joins the current round (BSP). Returns the version the pusher must wait
  // for before its pull reflects the push (the new version for ASP/SSP, the round's end for BSP).
  absl::StatusOr<int64_t> Push(const PushMeta& meta, PushStaging& staging, const WaitOptions& wait);

  // Waits until `worker` may read the model (BSP: its round is complete; SSP: the slowest worker
  // is within `staleness` clocks), then copies the model.
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
  absl::Status CheckUsable() const;  // with mu_ held
  // Waits on cv_ until ready() holds; with mu_ held via `lock`.
  absl::Status WaitUntil(std::unique_lock<std::mutex>& lock, const WaitOptions& wait,
                         const std::function<bool()>& ready,
                         const std::function<std::string()>& what, uint64_t generation);
  double GlobalEpoch() const;  // with mu_ held
  // With mu_ held; `requested_lr` > 0 replaces the configured base rate (a push's own).
  SgdOptions SgdForNextUpdate(double requested_lr = 0) const;
  void ApplyUpdate(const float* gradient, const float* buffers, const SgdOptions& sgd);  // mu_ held

  const PartitionConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const PartitionLayout> layout_;  // null until loaded
  std::vector<float> values_, velocity_;
  int64_t version_ = 0, pushes_ = 0, rejected_ = 0, samples_ = 0;
  int64_t waited_pulls_ = 0, max_clock_gap_ = 0;
  double last_lr_ = -1;  // rate of the last update applied; -1 before any
  std::vector<int64_t> staleness_histogram_;
  std::vector<int64_t> clocks_;  // accepted pushes per worker since the load
  bool shutdown_ = false;
  uint64_t next_generation_ = 1;

  // The BSP round being gathered.
  std::vector<float> round_sum_;
  std::vector<bool> round_has_;
  int round_count_ = 0;
  int64_t round_samples_ = 0;
  double round_lr_ = 0;  // the rate the round's pushes asked for (all must agree)
};

}  // namespace strata
