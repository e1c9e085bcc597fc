#include "services/parameter_server/partition.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "services/common/flat_layout.h"
#include "services/common/status.h"

namespace strata {

const char* ConsistencyName(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kAsp:
      return "asp";
    case ConsistencyMode::kBsp:
      return "bsp";
    case ConsistencyMode::kSsp:
      return "ssp";
  }
  return "?";
}

absl::StatusOr<ConsistencyMode> ConsistencyFromName(const std::string& name) {
  if (name == "asp") return ConsistencyMode::kAsp;
  if (name == "bsp") return ConsistencyMode::kBsp;
  if (name == "ssp") return ConsistencyMode::kSsp;
  return absl::InvalidArgumentError(
      absl::StrCat("consistency '", name, "' is not one of asp, bsp, ssp"));
}

// ---------------------------------------------------------------------------------------------
// PushStaging

PushStaging::PushStaging(std::shared_ptr<const PartitionLayout> layout)
    : layout_(std::move(layout)),
      values_(layout_->total_floats),
      seen_(layout_->entries.size(), false) {}

absl::StatusOr<void*> PushStaging::Destination(const TensorSpec& spec) {
  auto it = layout_->index.find(spec.name);
  if (it == layout_->index.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor '", spec.name, "': this partition does not hold it"));
  }
  const PartitionLayout::Entry& e = layout_->entries[it->second];
  if (spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has dtype ",
                                                   DTypeName(spec.dtype), ", expected float32"));
  }
  if (spec.shape != e.spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has shape ",
                                                   ShapeString(spec.shape), ", expected ",
                                                   ShapeString(e.spec.shape)));
  }
  if (seen_[it->second]) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name, "' sent twice in one push"));
  }
  seen_[it->second] = true;
  return static_cast<void*>(values_.data() + e.offset);
}

absl::Status PushStaging::Validate() const {
  for (size_t i = 0; i < seen_.size(); ++i) {
    if (!seen_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("push lacks tensor '", layout_->entries[i].spec.name, "'"));
    }
  }
  // A NaN or Inf would poison the model for every worker; find the tensor to name it.
  for (const auto& e : layout_->entries) {
    const float* p = values_.data() + e.offset;
    const size_t n = static_cast<size_t>(e.spec.numel());
    for (size_t k = 0; k < n; ++k) {
      if (!std::isfinite(p[k])) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", e.spec.name, "' holds ", p[k], " at element ", k));
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// ParameterPartition

ParameterPartition::ParameterPartition(PartitionConfig config)
    : config_(std::move(config)),
      staleness_histogram_(kStalenessBuckets, 0),
      clocks_(std::max(config_.workers, 1), 0),
      round_has_(std::max(config_.workers, 1), false) {}

bool ParameterPartition::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layout_ != nullptr;
}

absl::Status ParameterPartition::CheckUsable() const {
  if (shutdown_) return absl::UnavailableError("parameter server is stopping");
  if (layout_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("partition ", config_.partition,
                     " holds no model yet: start with --init-checkpoint or call LoadCheckpoint"));
  }
  return absl::OkStatus();
}

absl::Status ParameterPartition::Load(const Checkpoint& c, const std::string& origin) {
  // Which entries are ours: a partition checkpoint holds exactly this partition; a whole-model
  // checkpoint is cut by the same plan the workers compute.
  std::vector<const CheckpointEntry*> params, buffers;
  for (const auto& e : c.entries) {
    if (e.kind == TensorKind::kParameter) params.push_back(&e);
    if (e.kind == TensorKind::kBuffer) buffers.push_back(&e);
  }
  std::vector<const CheckpointEntry*> owned;
  const bool is_partition = c.extra.is_object() && c.extra.value("kind", "") == "partition";
  if (is_partition) {
    const int part = c.extra.value("partition", -1), parts = c.extra.value("partitions", -1);
    if (part != config_.partition || parts != config_.partitions) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, " holds partition ", part, " of ", parts, "; this server is partition ",
          config_.partition, " of ", config_.partitions));
    }
    owned = params;
    owned.insert(owned.end(), buffers.begin(), buffers.end());
  } else {
    std::vector<TensorSpec> model;
    for (const auto* e : params) model.push_back(e->tensor.spec);
    for (const auto* e : buffers) model.push_back(e->tensor.spec);
    auto plan = PlanPartitions(model, config_.partitions);
    if (!plan.ok()) return Annotate(plan.status(), origin);
    for (size_t i : plan->tensors_of[config_.partition]) {
      owned.push_back(i < params.size() ? params[i] : buffers[i - params.size()]);
    }
  }
  if (owned.empty())
    return absl::InvalidArgumentError(absl::StrCat(origin, " holds no model tensors"));

  auto layout = std::make_shared<PartitionLayout>();
  for (const CheckpointEntry* e : owned) {
    const TensorSpec& spec = e->tensor.spec;
    if (spec.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": tensor '", spec.name, "' is ",
                                                     DTypeName(spec.dtype), ", expected float32"));
    }
    if (e->tensor.data.size() != spec.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": tensor '", spec.name, "' holds ",
                                                     e->tensor.data.size(),
                                                     " bytes, its shape needs ", spec.bytes()));
    }
    if (!layout->index.emplace(spec.name, layout->entries.size()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": tensor '", spec.name, "' appears twice"));
    }
    PartitionLayout::Entry entry{spec, e->kind == TensorKind::kBuffer, layout->total_floats};
    layout->total_floats += static_cast<size_t>(spec.numel());
    if (!entry.is_buffer) layout->parameter_floats = layout->total_floats;
    layout->entries.push_back(std::move(entry));
  }
  std::vector<float> values(layout->total_floats), velocity(layout->total_floats, 0.0f);
  for (size_t i = 0; i < owned.size(); ++i) {
    const auto& e = layout->entries[i];
    std::memcpy(values.data() + e.offset, owned[i]->tensor.data.data(),
                owned[i]->tensor.data.size());
    if (e.is_buffer) continue;
    if (const CheckpointEntry* m = c.Find(TensorKind::kMomentum, e.spec.name)) {
      if (m->tensor.spec.shape != e.spec.shape || m->tensor.spec.dtype != DType::kFloat32 ||
          m->tensor.data.size() != e.spec.bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": momentum of '", e.spec.name, "' has shape ",
            ShapeString(m->tensor.spec.shape), ", expected ", ShapeString(e.spec.shape)));
      }
      std::memcpy(velocity.data() + e.offset, m->tensor.data.data(), m->tensor.data.size());
    }
  }
  int64_t samples = 0;
  if (c.extra.is_object() && c.extra.contains("samples") &&
      c.extra["samples"].is_number_integer()) {
    samples = c.extra["samples"].get<int64_t>();
  } else {
    // A worker's checkpoint: the global epoch resumes at the epoch it was written in.
    samples = c.epoch * config_.train_examples;
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return absl::UnavailableError("parameter server is stopping");
  layout->generation = next_generation_++;
  layout_ = std::move(layout);
  values_ = std::move(values);
  velocity_ = std::move(velocity);
  version_ = c.version;
  samples_ = std::max<int64_t>(samples, 0);
  std::fill(clocks_.begin(), clocks_.end(), 0);
  std::fill(round_has_.begin(), round_has_.end(), false);
  round_sum_.assign(layout_->total_floats, 0.0f);
  round_count_ = 0;
  round_samples_ = 0;
  cv_.notify_all();  // waiters see the new generation and give up
  return absl::OkStatus();
}

Checkpoint ParameterPartition::ToCheckpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  Checkpoint c;
  c.version = version_;
  c.step = pushes_;
  c.epoch = samples_ / std::max<int64_t>(config_.train_examples, 1);
  c.extra = {{"kind", "partition"},
             {"partition", config_.partition},
             {"partitions", config_.partitions},
             {"samples", samples_},
             {"consistency", ConsistencyName(config_.consistency)}};
  if (layout_ == nullptr) return c;
  auto add = [&](TensorKind kind, const PartitionLayout::Entry& e, const std::vector<float>& from) {
    CheckpointEntry entry{kind, NamedTensor::Zeros(e.spec)};
    std::memcpy(entry.tensor.data.data(), from.data() + e.offset, entry.tensor.data.size());
    c.entries.push_back(std::move(entry));
  };
  for (const auto& e : layout_->entries)
    add(e.is_buffer ? TensorKind::kBuffer : TensorKind::kParameter, e, values_);
  for (const auto& e : layout_->entries) {
    if (!e.is_buffer) add(TensorKind::kMomentum, e, velocity_);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<PushStaging>> ParameterPartition::NewStaging() const {
  std::shared_ptr<const PartitionLayout> layout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    STRATA_RETURN_IF_ERROR(CheckUsable());
    layout = layout_;
  }
  return std::make_unique<PushStaging>(std::move(layout));
}

double ParameterPartition::GlobalEpoch() const {
  return static_cast<double>(samples_) /
         static_cast<double>(std::max<int64_t>(config_.train_examples, 1));
}

SgdOptions ParameterPartition::SgdForNextUpdate(double requested_lr) const {
  // BSP averages n gradients of B/n examples each: one update of the global batch, at the job's
  // lr. ASP/SSP apply every worker's push separately, so each gets the per-worker lr. A worker
  // may ask for its own rate (Worker.Switch's lr); the schedule applies to it all the same.
  const double configured =
      config_.consistency == ConsistencyMode::kBsp ? config_.lr : config_.lr * config_.lr_scale;
  const double base = requested_lr > 0 ? requested_lr : configured;
  return {static_cast<float>(ScheduledLearningRate(base, config_.lr_schedule, GlobalEpoch())),
          static_cast<float>(config_.momentum), static_cast<float>(config_.weight_decay)};
}

void ParameterPartition::ApplyUpdate(const float* gradient, const float* buffers,
                                     const SgdOptions& sgd) {
  const size_t np = layout_->parameter_floats;
  SgdStep(values_.data(), gradient, velocity_.data(), np, sgd);
  last_lr_ = sgd.lr;
  std::memcpy(values_.data() + np, buffers, (layout_->total_floats - np) * sizeof(float));
}

absl::Status ParameterPartition::WaitUntil(std::unique_lock<std::mutex>& lock,
                                           const WaitOptions& wait,
                                           const std::function<bool()>& ready,
                                           const std::function<std::string()>& what,
                                           uint64_t generation) {
  bool waited = false;
  for (;;) {
    STRATA_RETURN_IF_ERROR(CheckUsable());
    if (layout_->generation != generation) {
      return absl::AbortedError(absl::StrCat(
          "partition ", config_.partition, " was reloaded from a checkpoint while waiting; retry"));
    }
    if (ready()) {
      if (waited) ++waited_pulls_;
      return absl::OkStatus();
    }
    waited = true;
    const auto now = std::chrono::system_clock::now();
    if (now >= wait.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("partition ", config_.partition, ": ", what()));
    }
    if (wait.cancelled && wait.cancelled()) return absl::CancelledError("the caller went away");
    // Slices, so that a cancelled call (a worker that died) frees its thread soon.
    const auto slice = std::min<std::chrono::system_clock::time_point>(
        wait.deadline, now + std::chrono::milliseconds(200));
    cv_.wait_until(lock, slice);
  }
}

absl::StatusOr<int64_t> ParameterPartition::Push(const PushMeta& meta, PushStaging& staging,
                                                 const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(CheckUsable());
  const uint64_t generation = staging.layout_->generation;
  if (layout_->generation != generation) {
    return absl::AbortedError("the partition was reloaded while the push arrived; pull and retry");
  }
  if (meta.worker < 0 || meta.worker >= config_.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", meta.worker, " outside [0, ", config_.workers, ")"));
  }
  if (meta.version > version_) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", meta.worker, " claims version ", meta.version,
                     ", the model is at version ", version_, " (a version from the future)"));
  }
  if (config_.consistency == ConsistencyMode::kBsp) {
    // One push per worker per round: a second one waits for the round to close.
    STRATA_RETURN_IF_ERROR(WaitUntil(
        lock, wait, [&] { return !round_has_[meta.worker]; },
        [&] {
          return absl::StrCat("BSP push of worker ", meta.worker, " waited for round ", version_,
                              " to close (", round_count_, " of ", config_.workers, " pushed)");
        },
        generation));
  }
  if (config_.consistency == ConsistencyMode::kBsp && round_count_ > 0 && meta.lr != round_lr_) {
    // One update per round: its pushes must agree on the rate it is applied at.
    return absl::InvalidArgumentError(absl::StrCat("BSP push of worker ", meta.worker,
                                                   " asks for learning rate ", meta.lr,
                                                   "; the earlier pushes of round ", version_,
                                                   " asked for ", round_lr_, " (0: the server's)"));
  }
  const int64_t staleness = version_ - meta.version;
  ++staleness_histogram_[std::min<int64_t>(staleness, kStalenessBuckets - 1)];
  ++pushes_;
  ++clocks_[meta.worker];
  const float* pushed = staging.values_.data();
  if (config_.consistency != ConsistencyMode::kBsp) {
    ApplyUpdate(pushed, pushed + layout_->parameter_floats, SgdForNextUpdate(meta.lr));
    samples_ += meta.samples;
    ++version_;
    cv_.notify_all();
    return version_;
  }
  float* sum = round_sum_.data();
  for (size_t i = 0; i < layout_->total_floats; ++i) sum[i] += pushed[i];
  if (round_count_ == 0) round_lr_ = meta.lr;
  round_has_[meta.worker] = true;
  round_samples_ += meta.samples;
  const int64_t round_end = version_ + 1;
  if (++round_count_ == config_.workers) {
    // The average of n mean gradients over B/n examples each is the mean over the global batch;
    // buffers (BatchNorm statistics) are averaged the same way.
    const float inv = 1.0f / static_cast<float>(config_.workers);
    for (size_t i = 0; i < layout_->total_floats; ++i) sum[i] *= inv;
    ApplyUpdate(sum, sum + layout_->parameter_floats, SgdForNextUpdate(round_lr_));
    samples_ += round_samples_;
    ++version_;
    std::fill(round_sum_.begin(), round_sum_.end(), 0.0f);
    std::fill(round_has_.begin(), round_has_.end(), false);
    round_count_ = 0;
    round_samples_ = 0;
    cv_.notify_all();
  }
  return round_end;
}

absl::StatusOr<PullSnapshot> ParameterPartition::Pull(int worker, int64_t min_version,
                                                      const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(CheckUsable());
  // worker -1 is an observer (the evaluator, a checkpoint reader): no consistency wait.
  if (worker < -1 || worker >= config_.workers) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", worker, " outside [0, ",
                                                   config_.workers, ") (or -1 for an observer)"));
  }
  const uint64_t generation = layout_->generation;
  auto slowest = [&] { return std::min_element(clocks_.begin(), clocks_.end()) - clocks_.begin(); };
  std::function<bool()> ready = [&] { return version_ >= min_version; };
  std::function<std::string()> what = [&] {
    return absl::StrCat("pull of worker ", worker, " waited for version ", min_version, " (at ",
                        version_, ")");
  };
  if (worker >= 0 && config_.consistency == ConsistencyMode::kBsp) {
    ready = [&] { return version_ >= min_version && !round_has_[worker]; };
    what = [&] {
      return absl::StrCat("BSP pull of worker ", worker, " waited for round ", version_,
                          " to close: ", round_count_, " of ", config_.workers, " workers pushed");
    };
  } else if (worker >= 0 && config_.consistency == ConsistencyMode::kSsp) {
    // The worker is about to compute step clocks_[worker]; the slowest one is computing step
    // min(clocks_). Release only while that gap is within the staleness bound.
    ready = [&] {
      return version_ >= min_version && clocks_[worker] - clocks_[slowest()] <= config_.staleness;
    };
    what = [&] {
      const auto k = slowest();
      return absl::StrCat("SSP pull of worker ", worker, " at clock ", clocks_[worker],
                          " waited for the slowest worker (worker ", k, " at clock ", clocks_[k],
                          ", staleness bound ", config_.staleness, ")");
    };
  }
  STRATA_RETURN_IF_ERROR(WaitUntil(lock, wait, ready, what, generation));
  if (worker >= 0) max_clock_gap_ = std::max(max_clock_gap_, clocks_[worker] - clocks_[slowest()]);
  PullSnapshot snapshot;
  snapshot.version = version_;
  snapshot.global_epoch = GlobalEpoch();
  snapshot.layout = layout_;
  snapshot.values = values_;
  return snapshot;
}

bool ParameterPartition::WaitForProgress(int64_t known_completed_epochs,
                                         std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t m = std::max<int64_t>(config_.train_examples, 1);
  return cv_.wait_for(lock, max_wait,
                      [&] { return shutdown_ || samples_ / m != known_completed_epochs; });
}

void ParameterPartition::CountRejected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_;
}

PartitionStatus ParameterPartition::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  PartitionStatus s;
  s.loaded = layout_ != nullptr;
  s.version = version_;
  s.pushes = pushes_;
  s.rejected_pushes = rejected_;
  s.samples = samples_;
  s.global_epoch = GlobalEpoch();
  s.completed_epochs = samples_ / std::max<int64_t>(config_.train_examples, 1);
  s.waited_pulls = waited_pulls_;
  s.max_clock_gap = max_clock_gap_;
  s.lr = last_lr_ >= 0 ? last_lr_ : SgdForNextUpdate().lr;
  s.staleness_histogram = staleness_histogram_;
  s.clocks = clocks_;
  if (layout_ != nullptr) {
    s.bytes = layout_->total_floats * sizeof(float);
    for (const auto& e : layout_->entries) s.tensors.push_back(e.spec.name);
  }
  return s;
}

bool ParameterPartition::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

void ParameterPartition::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace strata
