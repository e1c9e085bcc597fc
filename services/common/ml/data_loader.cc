#include "services/common/ml/data_loader.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace strata {
namespace {

// Mixes seed and epoch so that neighbouring epochs do not get correlated streams.
uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

std::vector<int64_t> BatchShape(int64_t n, const std::vector<int64_t>& one) {
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), one.begin(), one.end());
  return shape;
}

torch::Tensor RawBatch(const Dataset& dataset, const DatasetSplit& split,
                       const std::vector<int64_t>& examples, torch::Tensor* labels) {
  const size_t per = dataset.example_floats();
  const int64_t n = static_cast<int64_t>(examples.size());
  const std::vector<int64_t> one = dataset.ExampleShape();
  torch::Tensor x = torch::empty(BatchShape(n, one));
  float* dst = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) split.CopyFeatures(examples[i], per, dst + i * per);
  if (dataset.class_labels()) {
    *labels = torch::empty({n}, torch::kInt64);
    int64_t* lab = labels->data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) lab[i] = split.labels[examples[i]];
  } else {
    const size_t k = dataset.target_floats();
    *labels = torch::empty(BatchShape(n, dataset.target_shape));
    float* t = labels->data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(split.targets.data() + examples[i] * static_cast<int64_t>(k), k, t + i * k);
    }
  }
  return x;
}

// Per-channel normalisation, for the data sets that have it (the image sets; not the user's).
void Normalise(const Dataset& dataset, torch::Tensor* x) {
  if (dataset.mean.empty()) return;
  const int64_t c = static_cast<int64_t>(dataset.mean.size());
  x->sub_(torch::tensor(dataset.mean).view({1, c, 1, 1}))
      .div_(torch::tensor(dataset.stddev).view({1, c, 1, 1}));
}

}  // namespace

std::vector<int64_t> EpochOrder(const std::vector<int64_t>& indices, uint64_t seed, int64_t epoch,
                                bool shuffle) {
  std::vector<int64_t> order = indices;
  if (shuffle) {
    std::mt19937_64 rng(Mix(seed, static_cast<uint64_t>(epoch), 1));
    // Fisher-Yates written out: std::shuffle's draw sequence is not specified by the standard.
    for (size_t i = order.size(); i > 1; --i) {
      std::uniform_int_distribution<size_t> pick(0, i - 1);
      std::swap(order[i - 1], order[pick(rng)]);
    }
  }
  return order;
}

Batch MakeBatch(const Dataset& dataset, const DatasetSplit& split,
                const std::vector<int64_t>& examples) {
  Batch batch;
  batch.x = RawBatch(dataset, split, examples, &batch.y);
  Normalise(dataset, &batch.x);
  return batch;
}

torch::Tensor MakeInputFrom(const Dataset& dataset, const std::vector<float>& features, int64_t n) {
  torch::Tensor x = torch::from_blob(const_cast<float*>(features.data()),
                                     BatchShape(n, dataset.ExampleShape()), torch::kFloat32)
                        .clone();
  Normalise(dataset, &x);
  return x;
}

Batch MakeBatchFrom(const Dataset& dataset, const std::vector<float>& features,
                    const std::vector<int32_t>& labels) {
  const int64_t n = static_cast<int64_t>(labels.size());
  Batch batch;
  batch.x = MakeInputFrom(dataset, features, n);
  batch.y = torch::from_blob(const_cast<int32_t*>(labels.data()), {n}, torch::kInt32)
                .to(torch::kInt64);
  return batch;
}

DataLoader::DataLoader(const Dataset& dataset, const DatasetSplit& split,
                       std::vector<int64_t> indices, LoaderOptions options)
    : dataset_(dataset), split_(split), indices_(std::move(indices)), options_(options) {
  if (indices_.empty()) {
    indices_.resize(split.size());
    std::iota(indices_.begin(), indices_.end(), 0);
  }
  options_.augment = options_.augment && dataset.augment;
  if (!dataset.mean.empty()) {
    mean_ = torch::tensor(dataset.mean).view({1, -1, 1, 1});
    inv_std_ = 1.0 / torch::tensor(dataset.stddev).view({1, -1, 1, 1});
  }
  StartEpoch(0);
}

void DataLoader::StartEpoch(int64_t epoch) {
  epoch_ = epoch;
  order_ = EpochOrder(indices_, options_.seed, epoch, options_.shuffle);
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = examples();
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> DataLoader::BatchIndices(int64_t b) const {
  const int64_t begin = b * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, examples());
  return std::vector<int64_t>(order_.begin() + begin, order_.begin() + end);
}

Batch DataLoader::GetBatch(int64_t b) const {
  Batch batch;
  batch.x = RawBatch(dataset_, split_, BatchIndices(b), &batch.y);
  if (mean_.defined()) batch.x.sub_(mean_).mul_(inv_std_);
  if (options_.augment) {
    // Pad 4 (zeros after normalisation, as torchvision pads the normalised tensor), crop back at a
    // random offset, flip half of the images; one generator per (seed, epoch, batch).
    std::mt19937_64 rng(
        Mix(options_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(b) + 2));
    std::uniform_int_distribution<int64_t> shift(0, 8);
    std::bernoulli_distribution flip(0.5);
    const int64_t h = dataset_.height, w = dataset_.width;
    torch::Tensor padded = torch::constant_pad_nd(batch.x, {4, 4, 4, 4});
    for (int64_t i = 0; i < batch.x.size(0); ++i) {
      const int64_t dy = shift(rng), dx = shift(rng);
      torch::Tensor crop = padded[i].narrow(1, dy, h).narrow(2, dx, w);
      if (flip(rng)) crop = crop.flip({2});
      batch.x[i].copy_(crop);
    }
  }
  return batch;
}

}  // namespace strata
