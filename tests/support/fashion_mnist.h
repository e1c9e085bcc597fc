// Test data: the first examples of the real Fashion-MNIST (Debian's dataset-fashion-mnist),
// small enough for tests that train for a few steps.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "services/common/ml/dataset.h"

namespace strata::testing {

inline std::shared_ptr<const Dataset> FashionMnistSubset(size_t max_train, size_t max_test) {
  DatasetOptions options;
  options.name = v1::DATASET_FASHION_MNIST;
  options.path = "/usr/share/datasets/fashion-mnist";
  options.max_train = max_train;
  options.max_test = max_test;
  auto d = LoadDataset(options);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return nullptr;
  return std::make_shared<const Dataset>(std::move(*d));
}

}  // namespace strata::testing
