// Data sets as plain float arrays (no LibTorch): the sharder, the trainer and the evaluator read
// them the same way. Pixel values are scaled to [0, 1]; per-channel normalisation and
// augmentation happen in the data loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "strata/v1/job.pb.h"

namespace strata {

struct DatasetSplit {
  std::vector<float> features;  // size() * example_floats, row-major C x H x W per example
  std::vector<int32_t> labels;  // the class used for training and sharding
  // Synthetic data only: the hidden sub-cluster of each example (for checking the sharder).
  std::vector<int32_t> hidden_clusters;

  size_t size() const { return labels.size(); }
};

struct Dataset {
  std::string name;
  int64_t channels = 0, height = 0, width = 0;
  int num_classes = 0;
  std::vector<float> mean, stddev;  // per channel, for normalisation
  bool augment = false;             // random crop (padding 4) and horizontal flip while training
  DatasetSplit train, test;

  size_t example_floats() const { return static_cast<size_t>(channels * height * width); }
};

struct DatasetOptions {
  v1::DatasetName name = v1::DATASET_FASHION_MNIST;
  std::string path;  // directory holding the files (ignored for synthetic)
  v1::LabelSet label_set = v1::LABEL_SET_FINE;  // cifar100: fine (100 classes) or coarse (20)
  // Use only the first N examples of each split (0 = all); for quick tests and smoke runs.
  size_t max_train = 0, max_test = 0;
  // Synthetic Gaussian mixture: `classes` coarse labels, each hiding `subclusters` finer clusters.
  size_t synthetic_train = 6000, synthetic_test = 1000;
  int synthetic_classes = 4, synthetic_subclusters = 3, synthetic_dim = 32;
  uint64_t seed = 1;
};

absl::StatusOr<Dataset> LoadDataset(const DatasetOptions& options);

// The reader options the job's dataset section asks for (its seed seeds synthetic data).
DatasetOptions DatasetOptionsFor(const v1::ResolvedJob& job);

// The files a data set is read from, for fingerprints and for `strata validate`.
absl::StatusOr<std::vector<std::string>> DatasetFiles(const DatasetOptions& options);

// Low-level readers, exposed for tests. Files may be gzipped or plain (zlib reads both).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// CIFAR binary records: `label_bytes` label bytes (1 for CIFAR-10; 2 = coarse, fine for
// CIFAR-100) followed by 3072 pixel bytes. `label_index` picks which label byte to keep.
absl::Status ReadCifarFile(const std::string& path, int label_bytes, int label_index,
                           int num_classes, DatasetSplit* out);

// Standard-normal "images" with labels i % classes, the test split a copy of the training split:
// for throughput benchmarks that must match a peer's random-input set-up, not for learning.
Dataset MakeRandomImageDataset(int64_t examples, int64_t channels, int64_t height, int64_t width,
                               int classes, uint64_t seed);

// Deterministic Gaussian mixture; exposed for tests of the sharder.
Dataset MakeSyntheticDataset(const DatasetOptions& options);

}  // namespace strata
