// Writes a shard plan directory: manifest.json and shard-<worker>.idx
// (services/common/wire/shard_index.h). The directory appears whole or not at all: everything is
// written into a hidden sibling first, then renamed into place (an existing plan is swapped out
// atomically with renameat2).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "services/common/ml/dataset.h"
#include "sharder/shard_plan.h"

namespace strata::sharder {

inline constexpr char kManifestFormat[] = "strata-shard-plan";
inline constexpr int kManifestVersion = 1;

struct DatasetFile {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// Where the examples came from, so a worker (or a person) can tell whether a plan fits the data.
struct PlanProvenance {
  DatasetOptions dataset;   // name, path, label_set, max_train, synthetic settings
  std::string fingerprint;  // "crc32:<8 hex digits>" over the files (or the synthetic settings)
  std::vector<DatasetFile> files;
  std::vector<std::pair<std::string, double>> extra_phase_seconds;  // e.g. {"load", 0.4}, first
};

// CRC-32 of every file the data set is read from (or of the synthetic generator's settings).
absl::StatusOr<PlanProvenance> FingerprintDataset(const DatasetOptions& options);

nlohmann::ordered_json BuildManifest(const ShardPlan& plan, const PlanProvenance& provenance);

// Writes the plan into `out_dir` (its parents are created). If `out_dir` exists it must be an
// empty directory or an earlier shard plan: anything else is refused and left untouched.
absl::Status WriteShardPlan(const std::string& out_dir, const ShardPlan& plan,
                            const PlanProvenance& provenance);

}  // namespace strata::sharder
