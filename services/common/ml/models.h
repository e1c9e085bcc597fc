// The model zoo. Include only from LibTorch translation units; other code reaches models through
// trainer.h.
#pragma once

#include <memory>
#include <string>

#include <absl/status/statusor.h>
#include <torch/torch.h>

#include "strata/v1/job.pb.h"

namespace strata {

struct InputShape {
  int64_t channels = 1, height = 28, width = 28;
  int num_classes = 10;
};

// Every model maps [N, C, H, W] float input to [N, classes] logits.
class Net : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// mlp | mlp_wide | cnn | resnet20 | resnet32 | resnet56 (v1, He et al. 2016, CIFAR variant,
// projection shortcuts where the shape changes — as the PyTorch peer in bench/ uses).
absl::StatusOr<std::shared_ptr<Net>> MakeModel(v1::ModelArch arch, const InputShape& shape);

int64_t CountParameters(const torch::nn::Module& model);

}  // namespace strata
