#include "services/parameter_server/consistency_policy.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "services/parameter_server/consistency/policies.h"

namespace strata {
namespace {

struct NamedMode {
  ConsistencyMode mode;
  const char* name;
  v1::Consistency in_job;
};

constexpr NamedMode kModes[] = {
    {ConsistencyMode::kAsp, "asp", v1::CONSISTENCY_ASP},
    {ConsistencyMode::kBsp, "bsp", v1::CONSISTENCY_BSP},
    {ConsistencyMode::kSsp, "ssp", v1::CONSISTENCY_SSP},
    {ConsistencyMode::kPdp, "pdp", v1::CONSISTENCY_PDP},
    {ConsistencyMode::kApdp, "apdp", v1::CONSISTENCY_APDP},
};

}  // namespace

const char* ConsistencyName(ConsistencyMode mode) {
  for (const NamedMode& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

bool IsServerDecided(ConsistencyMode mode) {
  return mode == ConsistencyMode::kPdp || mode == ConsistencyMode::kApdp;
}

std::vector<std::string> ConsistencyNames() {
  std::vector<std::string> names;
  for (const NamedMode& m : kModes) names.push_back(m.name);
  return names;
}

absl::StatusOr<ConsistencyMode> ConsistencyFromName(const std::string& name) {
  for (const NamedMode& m : kModes) {
    if (name == m.name) return m.mode;
  }
  return absl::InvalidArgumentError(absl::StrCat("consistency '", name, "' is not one of ",
                                                 absl::StrJoin(ConsistencyNames(), ", ")));
}

absl::StatusOr<ConsistencyMode> ConsistencyFromJob(v1::Consistency consistency) {
  for (const NamedMode& m : kModes) {
    if (consistency == m.in_job) return m.mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the job names consistency ", static_cast<int>(consistency),
                   ", which is none of ", absl::StrJoin(ConsistencyNames(), ", ")));
}

v1::Consistency ConsistencyToJob(ConsistencyMode mode) {
  for (const NamedMode& m : kModes) {
    if (m.mode == mode) return m.in_job;
  }
  return v1::CONSISTENCY_UNSPECIFIED;
}

std::string VersionWaitText(int worker, int64_t min_version, int64_t version) {
  return absl::StrCat("pull of worker ", worker, " waited for version ", min_version, " (at ",
                      version, ")");
}

std::string ConsistencyPolicy::PushWaitText(const PushMeta& push,
                                            const PartitionProgress& progress) const {
  return absl::StrCat(ConsistencyName(mode()), " push of worker ", push.worker,
                      " waited at version ", progress.version);
}

absl::StatusOr<std::optional<CombinedUpdate>> ConsistencyPolicy::Accumulate(const PushMeta& push,
                                                                            const float*, size_t) {
  return absl::InternalError(absl::StrCat("the ", ConsistencyName(mode()),
                                          " policy gathers no rounds, yet push of worker ",
                                          push.worker, " was handed to it"));
}

std::string ConsistencyPolicy::ReadWaitText(int worker, int64_t min_version,
                                            const PartitionProgress& progress) const {
  return VersionWaitText(worker, min_version, progress.version);
}

std::unique_ptr<ConsistencyPolicy> MakeConsistencyPolicy(ConsistencyMode mode,
                                                         const ConsistencyConfig& config) {
  switch (mode) {
    case ConsistencyMode::kAsp:
      return MakeAspPolicy(config);
    case ConsistencyMode::kBsp:
      return MakeBspPolicy(config);
    case ConsistencyMode::kSsp:
      return MakeSspPolicy(config);
    case ConsistencyMode::kPdp:
    case ConsistencyMode::kApdp:
      return MakePointWeightedRoundPolicy(mode, config);
  }
  return nullptr;
}

}  // namespace strata
