#include "sharder/clustering.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include <absl/strings/str_cat.h>
#include <torch/torch.h>

namespace strata::sharder {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Principal components from the covariance matrix: one dim x dim product over the data (a single
// large GEMM, near the machine's peak) and a dim x dim eigendecomposition, then one n x dim x p
// projection. For dim <= ~1000 this costs less than randomized SVD with power iterations.
// With 0 < fit_examples < n the covariance comes from a seeded uniform sample of that many rows
// (docs/sharding.md: the GEMM is most of the PCA's cost, and the leading components of a 784-pixel
// covariance are stable well below 60k samples); every example is still projected.
torch::Tensor Project(const torch::Tensor& x, int64_t components, int64_t fit_examples,
                      uint64_t seed) {
  const int64_t n = x.size(0);
  torch::Tensor fit = x;
  if (fit_examples > 0 && fit_examples < n) {
    std::vector<int64_t> rows(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rows[i] = i;
    std::mt19937_64 rng(seed ^ 0x5CA1AB1Eull);
    for (int64_t i = 0; i < fit_examples; ++i) {  // partial Fisher-Yates: the first m rows
      std::swap(rows[i], rows[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i))]);
    }
    rows.resize(static_cast<size_t>(fit_examples));
    std::sort(rows.begin(), rows.end());  // sequential reads while gathering
    fit = x.index_select(0, torch::tensor(rows, torch::dtype(torch::kInt64)));
  }
  torch::Tensor mean = fit.mean(0, /*keepdim=*/true);                                // 1 x dim
  torch::Tensor cov = torch::mm(fit.t(), fit).div_(static_cast<double>(fit.size(0)));  // E[x x^T]
  cov.sub_(torch::mm(mean.t(), mean));
  torch::Tensor vectors = std::get<1>(torch::linalg_eigh(cov));
  // eigh sorts ascending; keep the last `components` columns, largest first.
  torch::Tensor basis = vectors.narrow(1, vectors.size(1) - components, components).flip({1}).contiguous();
  return torch::mm(x, basis).sub_(torch::mm(mean, basis));  // n x components, centred
}

// Greedy k-means++ (Arthur & Vassilvitskii; the variant scikit-learn uses): the first centre
// uniformly at random; for each next one, draw 2 + ln(k) candidates with probability proportional
// to the squared distance to the nearest centre so far and keep the candidate that lowers the
// total squared distance most. The candidates are scored with one GEMM. Draws come from our own
// seeded generator, so the plan depends on the seed only.
torch::Tensor KMeansPlusPlus(const torch::Tensor& z, const torch::Tensor& z_norms, int k,
                             std::mt19937_64* rng) {
  const int64_t n = z.size(0);
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  torch::Tensor centres = torch::empty({k, z.size(1)}, z.options());
  const int64_t first = static_cast<int64_t>((*rng)() % static_cast<uint64_t>(n));
  centres[0].copy_(z[first]);
  // ||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2 for a batch of candidates c (rows), clamped at 0
  // against rounding: n x candidates.
  auto squared_distances = [&](const torch::Tensor& c) {
    torch::Tensor c_norms = c.mul(c).sum(1).unsqueeze(0);
    return torch::addmm(c_norms, z, c.t(), /*beta=*/1, /*alpha=*/-2).add_(z_norms.unsqueeze(1)).clamp_min_(0);
  };
  torch::Tensor nearest = squared_distances(centres.narrow(0, 0, 1)).squeeze(1);
  for (int j = 1; j < k; ++j) {
    torch::Tensor cumulative = nearest.to(torch::kFloat64).cumsum(0);
    const double total = cumulative[n - 1].item<double>();
    std::vector<int64_t> picks(trials);
    for (int64_t& pick : picks) {
      // total == 0: every example coincides with a centre already; any choice is as good.
      pick = total <= 0 ? static_cast<int64_t>((*rng)() % static_cast<uint64_t>(n)) : -1;
    }
    if (total > 0) {
      std::vector<double> targets(trials);
      for (double& t : targets) t = uniform(*rng) * total;
      torch::Tensor found = torch::searchsorted(
          cumulative, torch::tensor(targets, torch::dtype(torch::kFloat64)));
      for (int t = 0; t < trials; ++t) picks[t] = std::min<int64_t>(found[t].item<int64_t>(), n - 1);
    }
    torch::Tensor candidates = z.index_select(0, torch::tensor(picks, torch::dtype(torch::kInt64)));
    torch::Tensor merged = torch::minimum(squared_distances(candidates), nearest.unsqueeze(1));
    const int64_t best = merged.sum(0).argmin().item<int64_t>();
    centres[j].copy_(candidates[best]);
    nearest = merged.select(1, best).contiguous();
  }
  return centres;
}

struct Assignment {
  torch::Tensor labels;     // int64, n
  torch::Tensor distances;  // float, n: squared distance to the assigned centre
};

// All n x k distances in one GEMM: argmin_c ||z - c||^2 = argmin_c (||c||^2 - 2 z.c).
Assignment Assign(const torch::Tensor& z, const torch::Tensor& z_norms, const torch::Tensor& centres) {
  torch::Tensor centre_norms = centres.mul(centres).sum(1).unsqueeze(0);  // 1 x k
  torch::Tensor scores = torch::addmm(centre_norms, z, centres.t(), /*beta=*/1, /*alpha=*/-2);
  auto [best, labels] = scores.min(1);
  return {labels, best.add_(z_norms).clamp_min_(0)};
}

}  // namespace

int SetClusteringThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  return threads;
}

absl::StatusOr<ClusteringResult> PcaKMeans(const float* features, int64_t n, int64_t dim,
                                           const ClusteringOptions& options) {
  if (options.pca_components < 1 || options.pca_components > dim) {
    return absl::InvalidArgumentError(absl::StrCat("pca_components must be in 1..", dim,
                                                   " (the data dimension), got ",
                                                   options.pca_components));
  }
  if (options.clusters < 1 || options.clusters > n) {
    return absl::InvalidArgumentError(absl::StrCat("clusters must be in 1..", n,
                                                   " (the number of examples), got ", options.clusters));
  }
  if (options.max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be >= 1, got ", options.max_iterations));
  }
  ClusteringResult result;
  try {
    torch::NoGradGuard no_grad;
    auto start = std::chrono::steady_clock::now();
    // from_blob borrows the data set's buffer; nothing below writes to it.
    torch::Tensor x = torch::from_blob(const_cast<float*>(features), {n, dim}, torch::kFloat32);
    torch::Tensor z = Project(x, options.pca_components, options.pca_fit_examples, options.seed);
    result.pca_seconds = SecondsSince(start);

    start = std::chrono::steady_clock::now();
    const int k = options.clusters;
    std::mt19937_64 rng(options.seed);
    torch::Tensor z_norms = z.mul(z).sum(1);
    const double tolerance = options.tolerance * z.var(0, /*unbiased=*/false).mean().item<double>();
    torch::Tensor centres = KMeansPlusPlus(z, z_norms, k, &rng);
    Assignment current = Assign(z, z_norms, centres);
    for (int it = 0; it < options.max_iterations; ++it) {
      // Update step: per-cluster sums with one scatter-add, counts with bincount.
      torch::Tensor sums = torch::zeros_like(centres).index_add_(0, current.labels, z);
      torch::Tensor counts = torch::bincount(current.labels, /*weights=*/{}, k).to(torch::kFloat32);
      torch::Tensor updated = sums.div_(counts.clamp_min(1).unsqueeze(1));
      // An empty cluster takes the example farthest from its centre (as scikit-learn does), so
      // the plan always has `clusters` neighbourhoods when the data allows it.
      torch::Tensor empty = (counts == 0).nonzero().flatten();
      if (empty.numel() > 0) {
        torch::Tensor far = std::get<1>(current.distances.topk(empty.numel()));
        updated.index_copy_(0, empty, z.index_select(0, far));
      }
      const double shift = (updated - centres).pow(2).sum().item<double>();
      centres = updated;
      Assignment next = Assign(z, z_norms, centres);
      const bool unchanged = torch::equal(next.labels, current.labels);
      current = std::move(next);
      result.iterations = it + 1;
      if (unchanged || shift <= tolerance) {
        result.converged = true;
        break;
      }
    }
    result.inertia = current.distances.sum().item<double>();
    torch::Tensor labels = current.labels.to(torch::kInt32).contiguous();
    result.assignments.assign(labels.data_ptr<int32_t>(), labels.data_ptr<int32_t>() + n);
    result.kmeans_seconds = SecondsSince(start);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("PCA/KMeans failed in LibTorch: ", e.what_without_backtrace()));
  }
  return result;
}

}  // namespace strata::sharder
