// PCA + KMeans (k-means++ initialisation, Lloyd steps) on LibTorch tensors: the neighbourhoods of
// distribution-aware sharding. Torch-free header; clustering.cc is the only LibTorch file here.
#pragma once

#include <cstdint>
#include <vector>

#include <absl/status/statusor.h>

namespace strata::sharder {

struct ClusteringOptions {
  int pca_components = 50;
  int clusters = 20;
  int max_iterations = 150;
  uint64_t seed = 1;
  // Lloyd stops early when the centres move less than tolerance x (mean per-feature variance of
  // the projected data), summed over centres and squared: scikit-learn's criterion and default.
  double tolerance = 1e-4;
  // Fit the PCA on a seeded sample of this many examples (0 = all of them); all are projected.
  int64_t pca_fit_examples = 0;
};

struct ClusteringResult {
  std::vector<int32_t> assignments;  // per example, in [0, clusters)
  int iterations = 0;                // Lloyd steps run
  bool converged = false;            // stopped before max_iterations
  double inertia = 0;                // sum of squared distances to the assigned centre (PCA space)
  double pca_seconds = 0, kmeans_seconds = 0;
};

// `features` holds n x dim floats, row-major, and is only read. Requires 1 <= pca_components <=
// dim and 1 <= clusters <= n (checked; an InvalidArgument names the key).
absl::StatusOr<ClusteringResult> PcaKMeans(const float* features, int64_t n, int64_t dim,
                                           const ClusteringOptions& options);

// LibTorch intra-op threads for the clustering (0 = all cores); returns the number used.
int SetClusteringThreads(int threads);

}  // namespace strata::sharder
