// SSP (stale synchronous parallel, Ho et al. 2013): pushes are applied at once as in ASP, but a
// worker may read only while it is at most `staleness` clocks ahead of the slowest worker. A
// worker's clock is the number of its pushes the store accepted since the last load; when it
// pulls it is about to compute step clocks[worker], while the slowest one computes
// min(clocks).
#include <algorithm>

#include <absl/strings/str_cat.h>

#include "services/parameter_server/consistency/policies.h"

namespace strata {
namespace {

size_t Slowest(absl::Span<const int64_t> clocks) {
  return static_cast<size_t>(std::min_element(clocks.begin(), clocks.end()) - clocks.begin());
}

class SspPolicy : public ConsistencyPolicy {
 public:
  explicit SspPolicy(const ConsistencyConfig& config) : config_(config) {}

  v1::Consistency mode() const override { return v1::CONSISTENCY_SSP; }

  PushDecision DecidePush(const PushMeta&, const PartitionProgress&) const override {
    return {PushAction::kApply, {}};
  }

  bool MayRead(int worker, const PartitionProgress& progress) const override {
    const auto& clocks = progress.clocks;
    return clocks[worker] - clocks[Slowest(clocks)] <= config_.staleness;
  }

  std::string ReadWaitText(int worker, int64_t, const PartitionProgress& progress) const override {
    const auto& clocks = progress.clocks;
    const size_t k = Slowest(clocks);
    return absl::StrCat("SSP pull of worker ", worker, " at clock ", clocks[worker],
                        " waited for the slowest worker (worker ", k, " at clock ", clocks[k],
                        ", staleness bound ", config_.staleness, ")");
  }

  double BaseLearningRate() const override { return config_.lr * config_.lr_scale; }

 private:
  const ConsistencyConfig config_;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> MakeSspPolicy(const ConsistencyConfig& config) {
  return std::make_unique<SspPolicy>(config);
}

}  // namespace strata
