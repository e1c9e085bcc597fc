#include "services/worker/allreduce_sync.h"

#include <cstring>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "services/collective/bucket_reduction.h"
#include "services/common/base/status.h"

namespace strata {
namespace {

class AllReduceSynchroniser final : public Synchroniser {
 public:
  AllReduceSynchroniser(RingAllReduce* ring, const AllReduceSyncOptions& options)
      : ring_(ring),
        options_(options.ring),
        source_rank_(options.source_rank),
        bucket_bytes_(options.bucket_bytes) {}

  ~AllReduceSynchroniser() override {
    if (trainer_ != nullptr) trainer_->RemoveGradientListener(this);
  }

  std::string name() const override {
    return bucket_bytes_ > 0 ? "allreduce (overlapped buckets)" : "allreduce";
  }

  absl::Status Start(Trainer& trainer) override {
    STRATA_RETURN_IF_ERROR(Broadcast(trainer));
    if (bucket_bytes_ > 0) {
      trainer_ = &trainer;
      buckets_ = std::make_unique<BucketReduction>(ring_, options_, trainer.parameters(),
                                                   trainer.gradient_data(), bucket_bytes_);
      trainer.SetGradientListener(this, [this](size_t i) { buckets_->OnGradientReady(i); });
    }
    return absl::OkStatus();
  }

  absl::StatusOr<StepOutcome> Step(Trainer& trainer, const StepContext& context) override {
    const std::string what =
        absl::StrCat("all-reduce of step ", context.step, " (epoch ", context.epoch + 1, ")");
    // The switch vote rides in one extra float after the values. Every rank receives the same
    // average, world x average is the number of yes votes (a small integer, up to rounding), so
    // all ranks switch after the same step, without another round trip.
    const float vote = context.ready_to_switch ? 1.0f : 0.0f;
    absl::StatusOr<float> reduced =
        buckets_ ? ReduceRest(trainer, vote, what) : ReduceAll(trainer, vote, what);
    if (!reduced.ok()) {
      // OUT_OF_RANGE is the Synchroniser's "cannot be sent at all": only for a value beyond the
      // 16-bit ring's range; any other failure of the ring is one the loop may survive.
      const absl::Status& s = reduced.status();
      if (absl::IsOutOfRange(s) && !BeyondHalfRange(s)) {
        return absl::UnavailableError(std::string(s.message()));
      }
      return s;
    }
    const float average_vote = *reduced;
    trainer.ApplyGradients(trainer.SgdFor(static_cast<double>(context.epoch)));
    const float world = static_cast<float>(ring_->world());
    return StepOutcome{average_vote * world > world - 0.5f};
  }

 private:
  absl::Status Broadcast(Trainer& trainer) {
    // Broadcast as a sum with zeros everywhere but the source: x + 0 is exact, so every replica
    // receives the source's bits. Parameters, velocity and buffers travel in one operation.
    const size_t p = trainer.parameters().total_floats();
    const size_t b = trainer.buffers().total_floats();
    std::vector<float> model(2 * p + b, 0.0f);
    if (ring_->rank() == source_rank_) {
      std::memcpy(model.data(), trainer.parameter_data(), p * sizeof(float));
      std::memcpy(model.data() + p, trainer.velocity_data(), p * sizeof(float));
      trainer.CopyBuffersTo(model.data() + 2 * p);
    }
    // The model itself, not a gradient: never rounded.
    STRATA_RETURN_IF_ERROR(
        Annotate(ring_->AllReduceSum(model.data(), model.size(), Exact()),
                 absl::StrCat("all-reduce start: broadcasting rank ", source_rank_, "'s model")));
    std::memcpy(trainer.parameter_data(), model.data(), p * sizeof(float));
    std::memcpy(trainer.velocity_data(), model.data() + p, p * sizeof(float));
    trainer.SetBuffersFrom(model.data() + 2 * p);
    return absl::OkStatus();
  }

  // The ring's options for what is never rounded to 16 bits: the model and the BatchNorm
  // statistics.
  AllReduceOptions Exact() const {
    AllReduceOptions exact = options_;
    exact.half_precision = false;
    return exact;
  }

  // Gradients, buffers and the vote in one operation after backward; returns the average vote.
  absl::StatusOr<float> ReduceAll(Trainer& trainer, float vote, const std::string& what) {
    const size_t p = trainer.parameters().total_floats();
    const size_t b = trainer.buffers().total_floats();
    float average_vote = 0.0f;
    if (b == 0 || options_.half_precision) {
      // No float buffers, or 16-bit gradients: reduce the fused gradient buffer where it lies (it
      // has a spare float after the gradients for the vote); BatchNorm statistics, if any, then
      // go exactly in a small operation of their own (their moving averages change by less than
      // a half's precision from step to step).
      float* gradients = trainer.gradient_data();
      gradients[p] = vote;
      STRATA_RETURN_IF_ERROR(Annotate(ring_->AllReduceAverage(gradients, p + 1, options_), what));
      average_vote = gradients[p];
      if (b > 0) {
        staging_.resize(b);
        trainer.CopyBuffersTo(staging_.data());
        STRATA_RETURN_IF_ERROR(
            Annotate(ring_->AllReduceAverage(staging_.data(), b, Exact()), what));
        trainer.SetBuffersFrom(staging_.data());
      }
    } else {
      // Gradients and BatchNorm statistics in one operation: one ring latency per step instead
      // of two, for one copy of the gradients (small next to the transfer).
      staging_.resize(p + b + 1);
      std::memcpy(staging_.data(), trainer.gradient_data(), p * sizeof(float));
      trainer.CopyBuffersTo(staging_.data() + p);
      staging_[p + b] = vote;
      STRATA_RETURN_IF_ERROR(
          Annotate(ring_->AllReduceAverage(staging_.data(), staging_.size(), options_), what));
      std::memcpy(trainer.gradient_data(), staging_.data(), p * sizeof(float));
      trainer.SetBuffersFrom(staging_.data() + p);
      average_vote = staging_[p + b];
    }
    return average_vote;
  }

  // The buckets that backward has not sent yet, then the buffers and the vote in one small
  // operation; returns the average vote.
  absl::StatusOr<float> ReduceRest(Trainer& trainer, float vote, const std::string& what) {
    STRATA_RETURN_IF_ERROR(Annotate(buckets_->Finish(), what));
    const size_t b = trainer.buffers().total_floats();
    staging_.resize(b + 1);
    trainer.CopyBuffersTo(staging_.data());
    staging_[b] = vote;
    STRATA_RETURN_IF_ERROR(
        Annotate(ring_->AllReduceAverage(staging_.data(), staging_.size(), Exact()), what));
    trainer.SetBuffersFrom(staging_.data());
    return staging_[b];
  }

  RingAllReduce* ring_;
  AllReduceOptions options_;
  const int source_rank_;
  const size_t bucket_bytes_;
  std::vector<float> staging_;
  Trainer* trainer_ = nullptr;  // with buckets: whose gradient listener this is
  // Last: its thread, which may be reducing, stops before the members above go.
  std::unique_ptr<BucketReduction> buckets_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Synchroniser>> MakeAllReduceSynchroniser(
    RingAllReduce* ring, const AllReduceSyncOptions& options) {
  const int source_rank = options.source_rank;
  if (ring == nullptr) return absl::InvalidArgumentError("all-reduce synchroniser: no ring");
  if (ring->world() < 1) {
    return absl::FailedPreconditionError(
        "all-reduce synchroniser: the ring is not connected (Connect first)");
  }
  if (source_rank < 0 || source_rank >= ring->world()) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce synchroniser: source rank ",
                                                   source_rank, " outside a world of ",
                                                   ring->world()));
  }
  return std::unique_ptr<Synchroniser>(new AllReduceSynchroniser(ring, options));
}

}  // namespace strata
