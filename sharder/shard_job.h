// One sharding request, resolved from flags, a job spec or a gRPC request, and its execution:
// load the data set, plan, write the plan directory. strata-sharder's one-shot mode and its
// Sharder service both run exactly this.
#pragma once

#include <string>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "services/common/ml/dataset.h"
#include "sharder/plan_writer.h"
#include "sharder/shard_flags.h"
#include "sharder/shard_plan.h"
#include "strata/v1/sharder.pb.h"

namespace strata::sharder {

struct ShardJob {
  DatasetOptions dataset;
  ShardPlanOptions plan;
  std::string out_dir;
  int threads = 0;  // LibTorch threads for PCA/KMeans; 0 = all cores
};

// Flags first, then the job spec (if any), then defaults. Without a job spec, --dataset and
// --workers are required.
absl::StatusOr<ShardJob> ResolveShardJob(const shard::ShardFlags& flags);

// The same rules for a request: zero / empty fields are not set.
absl::StatusOr<ShardJob> ResolveShardJob(const v1::ShardRequest& request);

// What a job reads: the data set and its fingerprint. Reading takes no lock (the readers accept
// only regular files and read no more than a file of its size can hold, so a read ends).
struct ShardInput {
  Dataset dataset;
  PlanProvenance provenance;
};
absl::StatusOr<ShardInput> LoadShardInput(const ShardJob& job);

// Plans and writes the plan directory from what LoadShardInput read; returns the manifest that
// was written. On error nothing is left at out_dir.
absl::StatusOr<nlohmann::ordered_json> PlanShards(const ShardJob& job, ShardInput input);

// Both in turn.
absl::StatusOr<nlohmann::ordered_json> RunShardJob(const ShardJob& job);

}  // namespace strata::sharder
