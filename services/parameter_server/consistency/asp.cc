// ASP (asynchronous parallel): every push updates the model the moment it arrives and any
// worker may read at any time. Each push carries one worker's mini-batch, so it is applied at
// the per-worker rate lr * lr_scale.
#include "services/parameter_server/consistency/policies.h"

namespace strata {
namespace {

class AspPolicy : public ConsistencyPolicy {
 public:
  explicit AspPolicy(const ConsistencyConfig& config) : config_(config) {}

  v1::Consistency mode() const override { return v1::CONSISTENCY_ASP; }

  PushDecision DecidePush(const PushMeta&, const PartitionProgress&) const override {
    return {PushAction::kApply, {}};
  }

  bool MayRead(int, const PartitionProgress&) const override { return true; }

  double BaseLearningRate() const override { return config_.lr * config_.lr_scale; }

 private:
  const ConsistencyConfig config_;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> MakeAspPolicy(const ConsistencyConfig& config) {
  return std::make_unique<AspPolicy>(config);
}

}  // namespace strata
