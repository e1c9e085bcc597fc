#include "services/worker/allreduce_sync.h"

#include <cstring>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "services/common/status.h"

namespace strata {
namespace {

class AllReduceSynchroniser final : public Synchroniser {
 public:
  AllReduceSynchroniser(RingAllReduce* ring, const AllReduceOptions& options)
      : ring_(ring), options_(options) {}

  std::string name() const override { return "allreduce"; }

  absl::Status Start(Trainer& trainer) override {
    // Broadcast as a sum with zeros everywhere but rank 0: x + 0 is exact, so every replica
    // receives rank 0's bits. Parameters, velocity and buffers travel in one operation.
    const size_t p = trainer.parameters().total_floats();
    const size_t b = trainer.buffers().total_floats();
    std::vector<float> model(2 * p + b, 0.0f);
    if (ring_->rank() == 0) {
      std::memcpy(model.data(), trainer.parameter_data(), p * sizeof(float));
      std::memcpy(model.data() + p, trainer.velocity_data(), p * sizeof(float));
      trainer.CopyBuffersTo(model.data() + 2 * p);
    }
    STRATA_RETURN_IF_ERROR(Annotate(ring_->AllReduceSum(model.data(), model.size(), options_),
                                    "all-reduce start: broadcasting rank 0's model"));
    std::memcpy(trainer.parameter_data(), model.data(), p * sizeof(float));
    std::memcpy(trainer.velocity_data(), model.data() + p, p * sizeof(float));
    trainer.SetBuffersFrom(model.data() + 2 * p);
    return absl::OkStatus();
  }

  absl::Status Step(Trainer& trainer, const StepContext& context) override {
    const size_t p = trainer.parameters().total_floats();
    const size_t b = trainer.buffers().total_floats();
    const std::string what =
        absl::StrCat("all-reduce of step ", context.step, " (epoch ", context.epoch + 1, ")");
    if (b == 0) {
      // No float buffers: reduce the fused gradient buffer where it lies.
      STRATA_RETURN_IF_ERROR(
          Annotate(ring_->AllReduceAverage(trainer.gradient_data(), p, options_), what));
    } else {
      // Gradients and BatchNorm statistics in one operation: one ring latency per step instead
      // of two, for one copy of the gradients (small next to the transfer).
      staging_.resize(p + b);
      std::memcpy(staging_.data(), trainer.gradient_data(), p * sizeof(float));
      trainer.CopyBuffersTo(staging_.data() + p);
      STRATA_RETURN_IF_ERROR(
          Annotate(ring_->AllReduceAverage(staging_.data(), staging_.size(), options_), what));
      std::memcpy(trainer.gradient_data(), staging_.data(), p * sizeof(float));
      trainer.SetBuffersFrom(staging_.data() + p);
    }
    trainer.ApplyGradients(trainer.SgdFor(static_cast<double>(context.epoch)));
    return absl::OkStatus();
  }

 private:
  RingAllReduce* ring_;
  AllReduceOptions options_;
  std::vector<float> staging_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Synchroniser>> MakeAllReduceSynchroniser(
    RingAllReduce* ring, const AllReduceOptions& options) {
  if (ring == nullptr) return absl::InvalidArgumentError("all-reduce synchroniser: no ring");
  if (ring->world() < 1) {
    return absl::FailedPreconditionError(
        "all-reduce synchroniser: the ring is not connected (Connect first)");
  }
  return std::unique_ptr<Synchroniser>(new AllReduceSynchroniser(ring, options));
}

}  // namespace strata
