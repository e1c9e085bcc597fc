// BSP (bulk synchronous parallel): a round gathers exactly one push from every worker, then the
// model takes one update with their average. The average of n mean gradients over B/n examples
// each is the mean over the global batch of B, so BSP with n workers follows the same path as
// one worker training on the global batch, at the job's lr (not lr * lr_scale). Buffers
// (BatchNorm statistics) are averaged the same way.
//
// A worker's second push waits until the round closes; its pull waits until the round its push
// joined is applied. The round is one update, so its pushes must agree on the rate they ask for.
#include <algorithm>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/parameter_server/consistency/policies.h"

namespace strata {
namespace {

class BspPolicy : public ConsistencyPolicy {
 public:
  explicit BspPolicy(const ConsistencyConfig& config) : config_(config), round_(config.workers) {}

  v1::Consistency mode() const override { return v1::CONSISTENCY_BSP; }

  void Reset(size_t floats) override {
    sum_.assign(floats, 0.0f);
    round_.Clear();
  }

  PushDecision DecidePush(const PushMeta& push, const PartitionProgress& progress) const override {
    if (round_.pushed(push.worker)) return {PushAction::kWait, {}};
    if (round_.count() > 0 && push.lr != lr_) {
      return {PushAction::kRefuse,
              absl::StrCat("BSP push of worker ", push.worker, " asks for learning rate ", push.lr,
                           "; the earlier pushes of round ", progress.version, " asked for ", lr_,
                           " (0: the server's)")};
    }
    return {PushAction::kAccumulate, {}};
  }

  std::string PushWaitText(const PushMeta& push, const PartitionProgress& progress) const override {
    return absl::StrCat("BSP push of worker ", push.worker, " waited for round ", progress.version,
                        " to close (", round_.count(), " of ", config_.workers, " pushed)");
  }

  absl::StatusOr<std::optional<CombinedUpdate>> Accumulate(const PushMeta& push,
                                                           const float* values,
                                                           size_t floats) override {
    if (floats != sum_.size()) {
      return absl::InternalError(absl::StrCat("BSP round holds ", sum_.size(),
                                              " values, the push of worker ", push.worker, " ",
                                              floats, ": the policy was not reset on load"));
    }
    // The first push of a round overwrites what the previous round left in sum_.
    if (round_.count() == 0) {
      std::memcpy(sum_.data(), values, floats * sizeof(float));
      lr_ = push.lr;
    } else {
      for (size_t i = 0; i < floats; ++i) sum_[i] += values[i];
    }
    if (!round_.Add(push.worker, push.samples)) return std::nullopt;

    const float inv = 1.0f / static_cast<float>(config_.workers);
    for (float& v : sum_) v *= inv;
    CombinedUpdate update{sum_.data(), round_.samples(), lr_};
    round_.Clear();
    return update;
  }

  bool MayRead(int worker, const PartitionProgress&) const override {
    return !round_.pushed(worker);
  }

  std::string ReadWaitText(int worker, int64_t, const PartitionProgress& progress) const override {
    return absl::StrCat("BSP pull of worker ", worker, " waited for round ", progress.version,
                        " to close: ", round_.count(), " of ", config_.workers, " workers pushed");
  }

  double BaseLearningRate() const override { return config_.lr; }

 private:
  const ConsistencyConfig config_;
  // The round being gathered.
  std::vector<float> sum_;
  RoundMembers round_;
  double lr_ = 0;  // the rate the round's pushes ask for (all must agree)
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> MakeBspPolicy(const ConsistencyConfig& config) {
  return std::make_unique<BspPolicy>(config);
}

}  // namespace strata
