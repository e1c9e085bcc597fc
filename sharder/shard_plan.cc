#include "sharder/shard_plan.h"

#include <algorithm>
#include <chrono>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "services/common/config/job_keys.h"
#include "sharder/clustering.h"
#include "sharder/distribution_aware.h"
#include "sharder/simple_methods.h"

namespace strata::sharder {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::Status ValidateShardPlanOptions(const ShardPlanOptions& o, int64_t examples,
                                      int64_t example_floats) {
  if (o.method == v1::SHARD_METHOD_UNSPECIFIED || !v1::ShardMethod_IsValid(o.method)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown sharding method ",
                                                   static_cast<int>(o.method),
                                                   " (known: ", Spellings<v1::ShardMethod>(), ")"));
  }
  if (o.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers must be >= 1, got ", o.workers));
  }
  if (o.workers > examples) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers (", o.workers, ") is more than the examples in the training split (",
                     examples, "): some worker would get nothing"));
  }
  if (o.clusters < 1) {
    return absl::InvalidArgumentError(absl::StrCat("clusters must be >= 1, got ", o.clusters));
  }
  if (o.pca_components < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pca_components must be >= 1, got ", o.pca_components));
  }
  if (o.max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be >= 1, got ", o.max_iterations));
  }
  if (o.pca_fit_examples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pca_fit_examples must be >= 0 (0 = all examples), got ", o.pca_fit_examples));
  }
  if (o.method == v1::SHARD_METHOD_DISTRIBUTION_AWARE) {
    if (o.clusters > examples) {
      return absl::InvalidArgumentError(
          absl::StrCat("clusters (", o.clusters,
                       ") is more than the examples in the training split (", examples, ")"));
    }
    if (o.pca_components > example_floats) {
      return absl::InvalidArgumentError(absl::StrCat("pca_components (", o.pca_components,
                                                     ") is above the data dimension (",
                                                     example_floats, " floats per example)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardPlan> MakeShardPlan(const DatasetSplit& split, int64_t example_floats,
                                        int num_classes, const ShardPlanOptions& options) {
  const int64_t n = static_cast<int64_t>(split.size());
  if (absl::Status s = ValidateShardPlanOptions(options, n, example_floats); !s.ok()) return s;
  if (split.mapped_features == nullptr &&
      static_cast<int64_t>(split.features.size()) != n * example_floats) {
    return absl::InvalidArgumentError(absl::StrCat("the split holds ", split.features.size(),
                                                   " floats, expected ", n, " x ", example_floats));
  }
  ShardPlan plan;
  plan.options = options;
  plan.examples = n;
  plan.num_classes = num_classes;
  plan.class_totals.assign(num_classes, 0);
  for (int32_t label : split.labels) {
    if (label < 0 || label >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " outside 0..", num_classes - 1));
    }
    ++plan.class_totals[label];
  }

  auto start = std::chrono::steady_clock::now();
  if (options.method == v1::SHARD_METHOD_RANDOM) {
    plan.shards = RandomShards(n, options.workers, options.seed);
  } else if (options.method == v1::SHARD_METHOD_MOD) {
    plan.shards = ModShards(n, options.workers);
  } else if (options.method == v1::SHARD_METHOD_STRATIFIED) {
    plan.shards = StratifiedShards(split.labels, num_classes, options.workers, options.seed);
  } else {
    ClusteringOptions c;
    c.pca_components = options.pca_components;
    c.clusters = options.clusters;
    c.max_iterations = options.max_iterations;
    c.seed = options.seed;
    c.pca_fit_examples = options.pca_fit_examples;
    // Every example's features, flattened (a user's .npy file is read once, here).
    std::vector<float> scratch;
    const float* features = split.AllFeatures(static_cast<size_t>(example_floats), &scratch);
    auto clustering = PcaKMeans(features, n, example_floats, c);
    if (!clustering.ok()) return clustering.status();
    plan.phase_seconds.emplace_back("pca", clustering->pca_seconds);
    plan.phase_seconds.emplace_back("kmeans", clustering->kmeans_seconds);
    plan.kmeans_iterations = clustering->iterations;
    plan.kmeans_converged = clustering->converged;
    plan.kmeans_inertia = clustering->inertia;
    plan.cluster_of = std::move(clustering->assignments);
    start = std::chrono::steady_clock::now();
    plan.shards = SplitNeighbourhoods(plan.cluster_of, split.labels, options.clusters,
                                      options.workers, options.seed, &plan.clusters);
  }
  plan.shard_class_counts.assign(options.workers, std::vector<int64_t>(num_classes, 0));
  for (int w = 0; w < options.workers; ++w) {
    for (int64_t example : plan.shards[w]) ++plan.shard_class_counts[w][split.labels[example]];
  }
  plan.phase_seconds.emplace_back(
      options.method == v1::SHARD_METHOD_DISTRIBUTION_AWARE ? "split" : "plan",
      SecondsSince(start));
  return plan;
}

}  // namespace strata::sharder
