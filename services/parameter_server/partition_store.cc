#include "services/parameter_server/partition_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/partition_plan.h"
#include "services/common/wire/push_pull_frame.h"

namespace strata {
namespace {

// A tensor's bytes as its spec says, before anything is cut from them.
absl::Status CheckWhole(const NamedTensor& t, const std::string& origin) {
  if (t.spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": tensor '", t.name(), "' is ",
                                                   DTypeName(t.spec.dtype), ", expected float32"));
  }
  if (t.data.size() != t.spec.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": tensor '", t.name(), "' holds ",
                                                   t.data.size(), " bytes, its shape needs ",
                                                   t.spec.bytes()));
  }
  return absl::OkStatus();
}

// This partition's part of `c`: a partition checkpoint holds exactly this partition and is taken
// as it is (*owned points into it, and *from is `c`); a whole-model checkpoint is cut by the plan
// the workers compute, each piece with its momentum, into *cut (*owned points into it, *from is
// `cut`). Momentum is then looked up in *from under the owned entries' names.
absl::Status OwnedEntries(const Checkpoint& c, const PartitionConfig& config,
                          const std::string& origin, Checkpoint* cut,
                          std::vector<const CheckpointEntry*>* owned, const Checkpoint** from) {
  std::vector<const CheckpointEntry*> params, buffers;
  for (const auto& e : c.entries) {
    if (e.kind == TensorKind::kParameter) params.push_back(&e);
    if (e.kind == TensorKind::kBuffer) buffers.push_back(&e);
  }
  const bool is_partition = c.extra.is_object() && c.extra.value("kind", "") == "partition";
  if (is_partition) {
    const int part = c.extra.value("partition", -1), parts = c.extra.value("partitions", -1);
    if (part != config.partition || parts != config.partitions) {
      return absl::InvalidArgumentError(absl::StrCat(origin, " holds partition ", part, " of ",
                                                     parts, "; this server is partition ",
                                                     config.partition, " of ", config.partitions));
    }
    // Saved before splitting existed: whole tensors.
    const bool split = c.extra.value("split", false);
    if (config.partitions > 1 && split != config.split_tensors) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, " was cut ", split ? "with" : "without",
          " large tensors split into pieces; this server's job has strategy.ps_split ",
          config.split_tensors ? "true" : "false", " (set it as the run that saved it had it)"));
    }
    *owned = params;
    owned->insert(owned->end(), buffers.begin(), buffers.end());
    *from = &c;
  } else {
    std::vector<const CheckpointEntry*> model = params;
    model.insert(model.end(), buffers.begin(), buffers.end());
    std::vector<TensorSpec> specs;
    for (const auto* e : model) specs.push_back(e->tensor.spec);
    auto plan = PlanPartitions(specs, config.partitions, config.split_tensors);
    if (!plan.ok()) return Annotate(plan.status(), origin);
    const std::vector<TensorPiece>& mine = plan->pieces_of[config.partition];
    for (const TensorPiece& piece : mine) {
      const CheckpointEntry& e = *model[piece.tensor];
      STRATA_RETURN_IF_ERROR(CheckWhole(e.tensor, origin));
      absl::StatusOr<NamedTensor> sliced = SlicePiece(e.tensor, piece);
      if (!sliced.ok()) return Annotate(sliced.status(), origin);
      cut->entries.push_back({e.kind, *std::move(sliced)});
    }
    for (const TensorPiece& piece : mine) {
      const CheckpointEntry& e = *model[piece.tensor];
      const CheckpointEntry* m = e.kind == TensorKind::kParameter
                                     ? c.Find(TensorKind::kMomentum, e.tensor.name())
                                     : nullptr;
      if (m == nullptr) continue;
      if (m->tensor.spec.shape != e.tensor.spec.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": momentum of '", e.tensor.name(), "' has shape ",
            ShapeString(m->tensor.spec.shape), ", expected ", ShapeString(e.tensor.spec.shape)));
      }
      STRATA_RETURN_IF_ERROR(CheckWhole(m->tensor, origin));
      absl::StatusOr<NamedTensor> sliced = SlicePiece(m->tensor, piece);
      if (!sliced.ok()) return Annotate(sliced.status(), origin);
      cut->entries.push_back({TensorKind::kMomentum, *std::move(sliced)});
    }
    for (const CheckpointEntry& e : cut->entries) {
      if (e.kind != TensorKind::kMomentum) owned->push_back(&e);
    }
    *from = cut;
  }
  if (owned->empty())
    return absl::InvalidArgumentError(absl::StrCat(origin, " holds no model tensors"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PartitionLayout>> LayoutOf(
    const std::vector<const CheckpointEntry*>& owned, const std::string& origin) {
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
  push_pull_wire::LayoutFingerprint fingerprint;
  for (const auto& e : layout->entries) fingerprint.Add(e.spec, e.is_buffer);
  layout->fingerprint = fingerprint.value();
  return layout;
}

}  // namespace

absl::StatusOr<PartitionConfig> PartitionConfigFor(const v1::ResolvedJob& job, int partition,
                                                   int64_t train_examples) {
  PartitionConfig config;
  config.partition = partition;
  config.partitions = job.cluster().parameter_servers();
  if (partition < 0 || partition >= config.partitions) {
    return absl::InvalidArgumentError(absl::StrCat("partition ", partition, " is not in [0, ",
                                                   config.partitions, ") (the job's servers)"));
  }
  config.workers = job.cluster().workers();
  config.consistency = job.strategy().consistency();
  config.staleness = job.strategy().staleness();
  const v1::ResolvedTraining& t = job.training();
  config.lr = t.lr();
  config.momentum = t.momentum();
  config.weight_decay = t.weight_decay();
  config.lr_milestones.assign(t.lr_milestones().begin(), t.lr_milestones().end());
  config.lr_gamma = t.lr_gamma();
  config.lr_scale = job.strategy().server_lr_scale();
  config.train_examples = train_examples;
  config.split_tensors = job.strategy().ps_split();
  config.sample_budget = job.training().epochs() * train_examples;
  return config;
}

ConsistencyConfig ConsistencyConfigOf(const PartitionConfig& config) {
  return {config.workers, config.staleness, config.lr, config.lr_scale};
}

PartitionStore::PartitionStore(PartitionConfig config, std::unique_ptr<ConsistencyPolicy> policy)
    : config_(std::move(config)),
      policy_(std::move(policy)),
      staleness_histogram_(kStalenessBuckets, 0),
      clocks_(std::max(config_.workers, 1), 0),
      last_handed_(clocks_.size(), -1),
      handed_at_last_push_(clocks_.size(), -1),
      served_low_(kStalenessBuckets, 0),
      served_high_(kStalenessBuckets, 0) {}

bool PartitionStore::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layout_ != nullptr;
}

absl::Status PartitionStore::CheckUsable() const {
  if (shutdown_) return absl::UnavailableError("parameter server is stopping");
  if (layout_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("partition ", config_.partition,
                     " holds no model yet: start with --init-checkpoint or call LoadCheckpoint"));
  }
  return absl::OkStatus();
}

absl::Status PartitionStore::Load(const Checkpoint& c, const std::string& origin) {
  Checkpoint cut;
  std::vector<const CheckpointEntry*> owned;
  const Checkpoint* from = nullptr;
  STRATA_RETURN_IF_ERROR(OwnedEntries(c, config_, origin, &cut, &owned, &from));
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<PartitionLayout> layout, LayoutOf(owned, origin));
  std::vector<float> values(layout->total_floats), velocity(layout->total_floats, 0.0f);
  for (size_t i = 0; i < owned.size(); ++i) {
    const auto& e = layout->entries[i];
    std::memcpy(values.data() + e.offset, owned[i]->tensor.data.data(),
                owned[i]->tensor.data.size());
    if (e.is_buffer) continue;
    if (const CheckpointEntry* m = from->Find(TensorKind::kMomentum, e.spec.name)) {
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
  values_ = std::make_shared<std::vector<float>>(std::move(values));
  model_buffers_ = {values_};
  velocity_ = std::move(velocity);
  weight_bound_ = MaxAbsOrInfinity(values_->data(), layout_->parameter_floats);
  velocity_bound_ = MaxAbsOrInfinity(velocity_.data(), layout_->parameter_floats);
  version_ = c.version;
  samples_ = std::max<int64_t>(samples, 0);
  std::fill(clocks_.begin(), clocks_.end(), 0);
  std::fill(last_handed_.begin(), last_handed_.end(), -1);
  std::fill(handed_at_last_push_.begin(), handed_at_last_push_.end(), -1);
  policy_->Reset(layout_->total_floats);
  cv_.notify_all();  // waiters see the new generation and give up
  return absl::OkStatus();
}

Checkpoint PartitionStore::ToCheckpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  Checkpoint c;
  c.version = version_;
  c.step = pushes_;
  c.epoch = samples_ / std::max<int64_t>(config_.train_examples, 1);
  c.extra = {{"kind", "partition"},
             {"partition", config_.partition},
             {"partitions", config_.partitions},
             {"split", config_.split_tensors},
             {"samples", samples_},
             {"consistency", Spelled(policy_->mode())}};
  if (layout_ == nullptr) return c;
  auto add = [&](TensorKind kind, const PartitionLayout::Entry& e, const std::vector<float>& from) {
    CheckpointEntry entry{kind, NamedTensor::Zeros(e.spec)};
    std::memcpy(entry.tensor.data.data(), from.data() + e.offset, entry.tensor.data.size());
    c.entries.push_back(std::move(entry));
  };
  for (const auto& e : layout_->entries)
    add(e.is_buffer ? TensorKind::kBuffer : TensorKind::kParameter, e, *values_);
  for (const auto& e : layout_->entries) {
    if (!e.is_buffer) add(TensorKind::kMomentum, e, velocity_);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<PushStaging>> PartitionStore::NewStaging() const {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const PartitionLayout> layout, CurrentLayout());
  return std::make_unique<PushStaging>(std::move(layout));
}

absl::StatusOr<std::shared_ptr<const PartitionLayout>> PartitionStore::CurrentLayout() const {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(CheckUsable());
  return layout_;
}

double PartitionStore::GlobalEpoch() const {
  return static_cast<double>(samples_) /
         static_cast<double>(std::max<int64_t>(config_.train_examples, 1));
}

SgdOptions PartitionStore::SgdForNextUpdate(double requested_lr) const {
  // A worker may ask for its own rate (Worker.Switch's lr); the schedule applies to it all the
  // same.
  const double base = requested_lr > 0 ? requested_lr : policy_->BaseLearningRate();
  return {static_cast<float>(
              ScheduledLearningRate(base, config_.lr_milestones, config_.lr_gamma, GlobalEpoch())),
          static_cast<float>(config_.momentum), static_cast<float>(config_.weight_decay)};
}

bool PartitionStore::PublishedModelIsFree() const {
  const bool listed =
      std::find(model_buffers_.begin(), model_buffers_.end(), values_) != model_buffers_.end();
  if (values_.use_count() != (listed ? 2 : 1)) return false;
    // Pulls take their reference under mu_, which we hold, and let it go after their last read:
    // the fence pairs with the release in that decrement, so their reads come before our writes.
    // ThreadSanitizer does not model fences (GCC warns): its build goes without.
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  return true;
}

absl::Status PartitionStore::ApplyUpdate(const float* update, int64_t samples, double requested_lr,
                                         double update_bound) {
  const SgdOptions sgd = SgdForNextUpdate(requested_lr);
  const size_t np = layout_->parameter_floats;
  const size_t buffer_floats = layout_->total_floats - np;
  double weight_bound = weight_bound_, velocity_bound = velocity_bound_;
  const bool cannot_overflow =
      std::isfinite(sgd.lr) &&
      SgdStepCannotOverflow(sgd, update_bound, &weight_bound, &velocity_bound);
  if (cannot_overflow && PublishedModelIsFree()) {
    // Finite inputs and no overflow: the step stays finite, so it can go straight into the
    // model, as a worker's own optimizer does (three streams of memory instead of five).
    SgdStep(values_->data(), update, velocity_.data(), np, sgd);
    std::memcpy(values_->data() + np, update + np, buffer_floats * sizeof(float));
  } else {
    // The step goes into spare buffers that replace the model only if every value is finite:
    // finite gradients and a finite rate can still overflow, and one inf would reach every
    // worker at its next pull. Swapping keeps the cost of a step to one pass, no copy. The
    // weights go into a buffer no pull still encodes; a few are kept, as pulls overlap updates.
    constexpr size_t kMaxModelBuffers = 4;
    std::shared_ptr<std::vector<float>> next;
    for (const auto& b : model_buffers_) {
      if (b.use_count() == 1) {
        next = b;
        break;
      }
    }
    if (next == nullptr) {
      next = std::make_shared<std::vector<float>>(values_->size());
      if (model_buffers_.size() < kMaxModelBuffers) model_buffers_.push_back(next);
    }
    scratch_velocity_.resize(velocity_.size());
    if (!std::isfinite(sgd.lr) || !SgdStepInto(values_->data(), update, velocity_.data(),
                                               next->data(), scratch_velocity_.data(), np, sgd)) {
      return absl::InvalidArgumentError(
          absl::StrCat("partition ", config_.partition, ": the update at learning rate ", sgd.lr,
                       " would leave non-finite weights; refused, the model is unchanged"));
    }
    std::memcpy(next->data() + np, update + np, buffer_floats * sizeof(float));
    values_ = std::move(next);
    velocity_.swap(scratch_velocity_);
  }
  if (!cannot_overflow) {  // bounds unknown until a load measures them again
    weight_bound = velocity_bound = std::numeric_limits<double>::infinity();
  }
  weight_bound_ = weight_bound;
  velocity_bound_ = velocity_bound;
  last_lr_ = sgd.lr;
  samples_ += samples;
  ++version_;
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status PartitionStore::WaitUntil(std::unique_lock<std::mutex>& lock, const WaitOptions& wait,
                                       const std::function<bool()>& ready,
                                       const std::function<std::string()>& what,
                                       uint64_t generation) {
  bool waited = false;
  // Counted while it waits, so that an observer can see a call held by the rule (waiting_now).
  struct Counted {
    int64_t& waiting;
    bool on = false;
    ~Counted() {
      if (on) --waiting;
    }
  } counted{waiting_now_};
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
    if (!waited) {
      ++waiting_now_;
      counted.on = true;
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

absl::StatusOr<int64_t> PartitionStore::Push(const PushMeta& meta, const PushStaging& staging,
                                             const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(CheckUsable());
  const uint64_t generation = staging.layout().generation;
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
  PushDecision decision;
  STRATA_RETURN_IF_ERROR(WaitUntil(
      lock, wait,
      [&] {
        if (BudgetSpent()) return true;
        decision = policy_->DecidePush(meta, Progress());
        return decision.action != PushAction::kWait;
      },
      [&] { return policy_->PushWaitText(meta, Progress()); }, generation));
  if (BudgetSpent()) {
    // Computed while other workers finished the job's samples: the model is final.
    ++discarded_pushes_;
    return version_;
  }
  if (decision.action == PushAction::kRefuse) return absl::InvalidArgumentError(decision.refusal);

  const int64_t staleness = version_ - meta.version;
  ++staleness_histogram_[std::min<int64_t>(staleness, kStalenessBuckets - 1)];
  ++pushes_;
  ++clocks_[meta.worker];
  // What the server itself can say about the push's model, from the versions it handed out.
  const int64_t handed = last_handed_[meta.worker];
  const int64_t held = handed_at_last_push_[meta.worker];
  const bool counted = handed >= 0;
  auto bucket = [](int64_t gap) {
    return static_cast<size_t>(std::clamp<int64_t>(gap, 0, kStalenessBuckets - 1));
  };
  if (counted) {
    ++served_low_[bucket(version_ - handed)];
    ++served_high_[bucket(version_ - held)];
    handed_at_last_push_[meta.worker] = handed;
  }
  // Applied now or gathered into a round, the push shows in the next version.
  const int64_t reflected_in = version_ + 1;
  const float* pushed = staging.values();
  if (decision.action == PushAction::kApply) {
    if (absl::Status applied = ApplyUpdate(pushed, meta.samples, meta.lr, staging.max_abs());
        !applied.ok()) {
      // Refused: as if the push never arrived.
      --staleness_histogram_[std::min<int64_t>(staleness, kStalenessBuckets - 1)];
      --pushes_;
      --clocks_[meta.worker];
      if (counted) {
        --served_low_[bucket(version_ - handed)];
        --served_high_[bucket(version_ - held)];
        handed_at_last_push_[meta.worker] = held;
      }
      return applied;
    }
    return reflected_in;
  }
  STRATA_ASSIGN_OR_RETURN(std::optional<CombinedUpdate> round,
                          policy_->Accumulate(meta, pushed, layout_->total_floats));
  // A refused round leaves the model at its version; the round's other pushers then see their
  // pulls time out, which names the partition.
  if (round.has_value()) {
    STRATA_RETURN_IF_ERROR(ApplyUpdate(round->values, round->samples, round->requested_lr));
  }
  return reflected_in;
}

absl::StatusOr<PullSnapshot> PartitionStore::Pull(int worker, int64_t min_version,
                                                  const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(CheckUsable());
  if (worker < -1 || worker >= config_.workers) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", worker, " outside [0, ",
                                                   config_.workers, ") (or -1 for an observer)"));
  }
  const bool observer = worker < 0;
  STRATA_RETURN_IF_ERROR(WaitUntil(
      lock, wait,
      [&] {
        return BudgetSpent() ||
               (version_ >= min_version && (observer || policy_->MayRead(worker, Progress())));
      },
      [&] {
        return observer ? VersionWaitText(worker, min_version, version_)
                        : policy_->ReadWaitText(worker, min_version, Progress());
      },
      layout_->generation));
  if (!observer) {
    const int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
    max_clock_gap_ = std::max(max_clock_gap_, clocks_[worker] - slowest);
    // Its first pull since the load stands for "held at its previous push" at its first push.
    if (handed_at_last_push_[worker] < 0) handed_at_last_push_[worker] = version_;
    last_handed_[worker] = version_;
  }
  PullSnapshot snapshot;
  snapshot.version = version_;
  snapshot.global_epoch = GlobalEpoch();
  snapshot.samples = samples_;
  snapshot.sample_budget = config_.sample_budget;
  snapshot.layout = layout_;
  snapshot.values = values_;
  return snapshot;
}

bool PartitionStore::WaitForProgress(int64_t known_completed_epochs,
                                     std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t m = std::max<int64_t>(config_.train_examples, 1);
  return cv_.wait_for(lock, max_wait,
                      [&] { return shutdown_ || samples_ / m != known_completed_epochs; });
}

void PartitionStore::CountRejected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_;
}

PartitionStatus PartitionStore::Status() const {
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
  s.waiting_now = waiting_now_;
  s.sample_budget = config_.sample_budget;
  s.discarded_pushes = discarded_pushes_;
  s.max_clock_gap = max_clock_gap_;
  s.lr = last_lr_ >= 0 ? last_lr_ : SgdForNextUpdate().lr;
  s.staleness_histogram = staleness_histogram_;
  s.served_staleness_low = served_low_;
  s.served_staleness_high = served_high_;
  s.clocks = clocks_;
  if (layout_ != nullptr) {
    s.bytes = layout_->total_floats * sizeof(float);
    for (const auto& e : layout_->entries) s.tensors.push_back(e.spec.name);
  }
  return s;
}

bool PartitionStore::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

void PartitionStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace strata
