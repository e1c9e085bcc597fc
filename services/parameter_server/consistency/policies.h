// The makers of the consistency policies, one per file in this folder, and the round bookkeeping
// the gathering ones share. Only the factory (MakeConsistencyPolicy in consistency_policy.cc)
// calls the makers; everything else picks a policy by its v1::Consistency.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "services/parameter_server/consistency_policy.h"

namespace strata {

// Who is in the round a gathering policy (BSP, PDP, APDP) is collecting: one push per worker,
// after which the round closes and starts over.
class RoundMembers {
 public:
  explicit RoundMembers(int workers) : pushed_(std::max(workers, 1), false) {}
  bool pushed(int worker) const { return pushed_[worker]; }
  int count() const { return count_; }
  int64_t samples() const { return samples_; }
  // Records `worker`'s push of `samples` examples; true once every worker is in.
  bool Add(int worker, int64_t samples) {
    pushed_[worker] = true;
    samples_ += samples;
    return ++count_ >= static_cast<int>(pushed_.size());
  }
  void Clear() {
    std::fill(pushed_.begin(), pushed_.end(), false);
    count_ = 0;
    samples_ = 0;
  }
  // The workers not in yet, "1, 3".
  std::string Missing() const {
    std::string missing;
    for (size_t w = 0; w < pushed_.size(); ++w) {
      if (!pushed_[w]) missing += (missing.empty() ? "" : ", ") + std::to_string(w);
    }
    return missing;
  }

 private:
  std::vector<bool> pushed_;
  int count_ = 0;
  int64_t samples_ = 0;
};

std::unique_ptr<ConsistencyPolicy> MakeAspPolicy(const ConsistencyConfig& config);
std::unique_ptr<ConsistencyPolicy> MakeBspPolicy(const ConsistencyConfig& config);
std::unique_ptr<ConsistencyPolicy> MakeSspPolicy(const ConsistencyConfig& config);
// PDP and APDP share it: the partitions' side of the two differs only in the worker.
std::unique_ptr<ConsistencyPolicy> MakePointWeightedRoundPolicy(v1::Consistency mode,
                                                                const ConsistencyConfig& config);

}  // namespace strata
