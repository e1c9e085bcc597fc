// Data sets as plain float arrays (no LibTorch): the sharder, the trainer and the evaluator read
// them the same way. Pixel values are scaled to [0, 1]; per-channel normalisation and
// augmentation happen in the data loader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/wire/npy_file.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct DatasetSplit {
  std::vector<float> features;  // size() * example_floats, row-major per example
  // Your own data (dataset.name npy): the features stay in the memory-mapped train_x.npy or
  // test_x.npy and are converted to float as a batch reads them, so that a worker touches only
  // the pages of its shard; `features` is then empty.
  std::shared_ptr<const NpyArray> mapped_features;
  float mapped_scale = 1.0f;  // uint8 features are scaled to [0, 1], as the image sets' pixels
  // The class of each example, for training (cross_entropy) and for sharding. A data set of
  // targets (mse, bce_with_logits) holds 0 for every example: one class, as far as the sharder
  // is concerned.
  std::vector<int32_t> labels;
  // Data sets of targets: Dataset::target_floats() per example.
  std::vector<float> targets;
  // Synthetic data only: the hidden sub-cluster of each example (for checking the sharder).
  std::vector<int32_t> hidden_clusters;

  size_t size() const { return labels.size(); }
  // Example `e`'s `per` features as floats.
  void CopyFeatures(int64_t e, size_t per, float* out) const;
  // Every example's features, contiguous: `features` itself, or the mapped file converted into
  // `scratch` (the sharder's clustering reads them all).
  const float* AllFeatures(size_t per, std::vector<float>* scratch) const;
};

struct Dataset {
  std::string name;
  // The built-in models' input: channels x height x width (1 x 1 x D for vectors).
  int64_t channels = 0, height = 0, width = 0;
  // The shape of one example as a model receives it (the images' {channels, height, width}; the
  // trailing dimensions of train_x.npy).
  std::vector<int64_t> example_shape;
  // The shape of one target (the trailing dimensions of train_y.npy when it holds floats);
  // empty: each example has a class label.
  std::vector<int64_t> target_shape;
  // Classes of the labels; for a data set of targets, the floats of one target (what a built-in
  // model outputs).
  int num_classes = 0;
  std::vector<float> mean, stddev;  // per channel, for normalisation; empty: none
  bool augment = false;             // random crop (padding 4) and horizontal flip while training
  DatasetSplit train, test;

  // example_shape, or the built-in models' {channels, height, width} where it is empty.
  std::vector<int64_t> ExampleShape() const {
    return example_shape.empty() ? std::vector<int64_t>{channels, height, width} : example_shape;
  }
  size_t example_floats() const;
  size_t target_floats() const;
  bool class_labels() const { return target_shape.empty(); }
  // Whether `shape` is a batch a model of this data set takes: [N, ExampleShape()...], N from 1
  // to `max_examples` (0: any). The refusal (INVALID_ARGUMENT) says what was given and what is
  // taken: "input of shape [4, 28, 28]; the model takes [N, 1, 28, 28]".
  absl::Status CheckExampleBatch(const std::vector<int64_t>& shape, int64_t max_examples) const;
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
  // npy: read every feature once to refuse NaN and infinities (what `strata validate` and the
  // sharder do); a worker leaves it off and reads only its shard.
  bool scan_features = false;
};

absl::StatusOr<Dataset> LoadDataset(const DatasetOptions& options);

// The .npy files of dataset.name npy, relative to dataset.path: train_x.npy and train_y.npy,
// and optionally test_x.npy and test_y.npy (both or neither).
inline constexpr char kNpyTrainFeatures[] = "train_x.npy";
inline constexpr char kNpyTrainTargets[] = "train_y.npy";
inline constexpr char kNpyTestFeatures[] = "test_x.npy";
inline constexpr char kNpyTestTargets[] = "test_y.npy";

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
