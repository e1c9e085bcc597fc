// Shard plans: which training examples each of n workers reads. Four methods (docs/sharding.md):
// random, mod, stratified and distribution-aware (PCA + KMeans neighbourhoods, Provatas et al.).
// Torch-free header; only clustering.cc includes LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/common/ml/dataset.h"

namespace strata::sharder {

struct ShardPlanOptions {
  v1::ShardMethod method = v1::SHARD_METHOD_STRATIFIED;
  int workers = 0;
  // distribution-aware only
  int clusters = 20;
  int pca_components = 50;
  int max_iterations = 150;
  // Fit the PCA on a seeded sample of this many examples (0 = all); every example is projected.
  int64_t pca_fit_examples = 0;
  uint64_t seed = 1;
};

struct ClusterSummary {
  int64_t size = 0;
  bool broadcast = false;  // a sparse cluster (fewer examples than workers): given to every worker
};

struct ShardPlan {
  ShardPlanOptions options;
  int64_t examples = 0;
  int num_classes = 0;
  std::vector<int64_t> class_totals;                     // per class, over the whole split
  std::vector<std::vector<int64_t>> shards;              // per worker, ascending example indices
  std::vector<std::vector<int64_t>> shard_class_counts;  // per worker, per class
  // distribution-aware only
  std::vector<int32_t> cluster_of;  // per example: its KMeans neighbourhood
  std::vector<ClusterSummary> clusters;
  int kmeans_iterations = 0;
  bool kmeans_converged = false;
  double kmeans_inertia = 0;
  // Seconds per phase, in the order they ran ("pca", "kmeans", "split" or "plan").
  std::vector<std::pair<std::string, double>> phase_seconds;
};

// Checks the options against the data (examples, floats per example); messages name the key.
absl::Status ValidateShardPlanOptions(const ShardPlanOptions& options, int64_t examples,
                                      int64_t example_floats);

// Builds the plan for `split` (features are example_floats per example, labels < num_classes).
absl::StatusOr<ShardPlan> MakeShardPlan(const DatasetSplit& split, int64_t example_floats,
                                        int num_classes, const ShardPlanOptions& options);

}  // namespace strata::sharder
