#include "services/parameter_server/consistency_policy.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "services/parameter_server/consistency/policies.h"

namespace strata {

std::string VersionWaitText(int worker, int64_t min_version, int64_t version) {
  return absl::StrCat("pull of worker ", worker, " waited for version ", min_version, " (at ",
                      version, ")");
}

std::string ConsistencyPolicy::PushWaitText(const PushMeta& push,
                                            const PartitionProgress& progress) const {
  return absl::StrCat(Spelled(mode()), " push of worker ", push.worker, " waited at version ",
                      progress.version);
}

absl::StatusOr<std::optional<CombinedUpdate>> ConsistencyPolicy::Accumulate(const PushMeta& push,
                                                                            const float*, size_t) {
  return absl::InternalError(absl::StrCat("the ", Spelled(mode()),
                                          " policy gathers no rounds, yet push of worker ",
                                          push.worker, " was handed to it"));
}

std::string ConsistencyPolicy::ReadWaitText(int worker, int64_t min_version,
                                            const PartitionProgress& progress) const {
  return VersionWaitText(worker, min_version, progress.version);
}

std::unique_ptr<ConsistencyPolicy> MakeConsistencyPolicy(v1::Consistency mode,
                                                         const ConsistencyConfig& config) {
  switch (mode) {
    default:
      return nullptr;
    case v1::CONSISTENCY_ASP:
      return MakeAspPolicy(config);
    case v1::CONSISTENCY_BSP:
      return MakeBspPolicy(config);
    case v1::CONSISTENCY_SSP:
      return MakeSspPolicy(config);
    case v1::CONSISTENCY_PDP:
    case v1::CONSISTENCY_APDP:
      return MakePointWeightedRoundPolicy(mode, config);
  }
}

}  // namespace strata
