// PDP and APDP (server-decided pulls), the partitions' side: a round gathers exactly one update
// from every worker, each the mean gradient over however many points that worker processed since
// its last update, and the model takes one step with their average weighted by those points. The
// weighted average of means is the mean over all the round's points (about K* of them), so a
// round is one step on a global mini-batch of K* at the job's lr, as a BSP round is one step on
// the global batch; with equal counts the two are the same step. A straggler that processed few
// points weighs little instead of holding everyone back.
//
// When the round happens is not decided here: partition 0's PullCoordinator (pdp/) asks the
// workers for their updates. A worker's pull waits until the round it pushed into is applied;
// its second push of a round would wait too, but a worker never sends one.
#include <algorithm>

#include <absl/strings/str_cat.h>

#include "services/parameter_server/consistency/policies.h"

namespace strata {
namespace {

class PointWeightedRoundPolicy : public ConsistencyPolicy {
 public:
  PointWeightedRoundPolicy(v1::Consistency mode, const ConsistencyConfig& config)
      : mode_(mode), config_(config), round_(config.workers) {}

  v1::Consistency mode() const override { return mode_; }

  void Reset(size_t floats) override {
    sum_.assign(floats, 0.0);
    result_.assign(floats, 0.0f);
    round_.Clear();
  }

  PushDecision DecidePush(const PushMeta& push, const PartitionProgress&) const override {
    if (round_.pushed(push.worker)) return {PushAction::kWait, {}};
    if (push.samples < 0) {
      return {PushAction::kRefuse, absl::StrCat(Spelled(mode_), " update of worker ", push.worker,
                                                " counts ", push.samples, " points")};
    }
    return {PushAction::kAccumulate, {}};
  }

  std::string PushWaitText(const PushMeta& push, const PartitionProgress& progress) const override {
    return absl::StrCat(Spelled(mode_), " update of worker ", push.worker, " waited for round ",
                        progress.version, " to close (", round_.count(), " of ", config_.workers,
                        " updates in)");
  }

  absl::StatusOr<std::optional<CombinedUpdate>> Accumulate(const PushMeta& push,
                                                           const float* values,
                                                           size_t floats) override {
    if (floats != sum_.size()) {
      return absl::InternalError(absl::StrCat(Spelled(mode_), " round holds ", sum_.size(),
                                              " values, the update of worker ", push.worker, " ",
                                              floats, ": the policy was not reset on load"));
    }
    // Doubles: a round may weigh together tens of thousands of points.
    const double weight = static_cast<double>(push.samples);
    if (round_.count() == 0) {
      for (size_t i = 0; i < floats; ++i) sum_[i] = weight * values[i];
    } else {
      for (size_t i = 0; i < floats; ++i) sum_[i] += weight * values[i];
    }
    if (!round_.Add(push.worker, push.samples)) return std::nullopt;

    // A round whose updates carry no point at all (every worker's batch was still computing)
    // moves the model by momentum alone.
    const int64_t points = round_.samples();
    const double inv = points > 0 ? 1.0 / static_cast<double>(points) : 0.0;
    for (size_t i = 0; i < floats; ++i) result_[i] = static_cast<float>(sum_[i] * inv);
    CombinedUpdate update{result_.data(), points, 0};
    round_.Clear();
    return update;
  }

  bool MayRead(int worker, const PartitionProgress&) const override {
    return !round_.pushed(worker);
  }

  std::string ReadWaitText(int worker, int64_t, const PartitionProgress& progress) const override {
    return absl::StrCat(Spelled(mode_), " pull of worker ", worker, " waited for round ",
                        progress.version, " to close: ", round_.count(), " of ", config_.workers,
                        " updates in, waiting for worker ", round_.Missing());
  }

  double BaseLearningRate() const override { return config_.lr; }

 private:
  const v1::Consistency mode_;
  const ConsistencyConfig config_;
  std::vector<double> sum_;    // the round so far: sum over updates of points x values
  std::vector<float> result_;  // the combined update handed to the store
  RoundMembers round_;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> MakePointWeightedRoundPolicy(v1::Consistency mode,
                                                                const ConsistencyConfig& config) {
  return std::make_unique<PointWeightedRoundPolicy>(mode, config);
}

}  // namespace strata
