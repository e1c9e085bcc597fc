// Mini-batches from a list of example indices (a shard), reshuffled every epoch from a seed.
// The same (seed, epoch) always gives the same batches, augmentation included.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "services/common/ml/dataset.h"

namespace strata {

struct LoaderOptions {
  int64_t batch_size = 128;
  uint64_t seed = 1;
  bool shuffle = true;
  bool augment =
      false;  // random crop (padding 4) + horizontal flip; only where the data set allows
  bool drop_last = false;
};

struct Batch {
  torch::Tensor x;  // [B, ...one example's shape] float (the image sets' [B, C, H, W] normalised)
  torch::Tensor y;  // class labels: [B] int64; targets: [B, ...one target's shape] float
};

class DataLoader {
 public:
  // `dataset` and `split` must outlive the loader. Empty `indices` means the whole split.
  DataLoader(const Dataset& dataset, const DatasetSplit& split, std::vector<int64_t> indices,
             LoaderOptions options);

  void StartEpoch(int64_t epoch);
  int64_t batches_per_epoch() const;
  int64_t examples() const { return static_cast<int64_t>(indices_.size()); }
  // The example indices of batch `b` in the current epoch's order.
  std::vector<int64_t> BatchIndices(int64_t b) const;
  Batch GetBatch(int64_t b) const;

 private:
  const Dataset& dataset_;
  const DatasetSplit& split_;
  std::vector<int64_t> indices_;
  std::vector<int64_t> order_;
  LoaderOptions options_;
  int64_t epoch_ = 0;
  torch::Tensor mean_, inv_std_;
};

// The order of one epoch, shared with code that must reproduce it (the all-reduce and BSP
// equivalence checks split one global batch across workers).
std::vector<int64_t> EpochOrder(const std::vector<int64_t>& indices, uint64_t seed, int64_t epoch,
                                bool shuffle);

// Builds the normalised input tensor for the given examples, without augmentation.
Batch MakeBatch(const Dataset& dataset, const DatasetSplit& split,
                const std::vector<int64_t>& examples);
// The same for examples that arrived from elsewhere (a stream's events): `features` holds
// labels.size() examples of the data set's shape, raw as the data set stores them.
Batch MakeBatchFrom(const Dataset& dataset, const std::vector<float>& features,
                    const std::vector<int32_t>& labels);
// Only the normalised input of `n` such examples (for predictions: no labels).
torch::Tensor MakeInputFrom(const Dataset& dataset, const std::vector<float>& features, int64_t n);

}  // namespace strata
