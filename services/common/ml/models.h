// The models the trainer trains: the built-in zoo, and TorchScript files users bring
// (torch.jit.script(model).save(...) in Python). Include only from LibTorch translation units;
// other code reaches models through trainer.h.
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

// What the trainer needs of a model, built-in or TorchScript: its named tensors (to lay the
// trainable ones into the fused buffer and to copy the others), a forward pass, and the
// training/evaluation switch (dropout, BatchNorm statistics).
class TrainableModel {
 public:
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  virtual ~TrainableModel() = default;
  // The tensors the optimizer updates, in a fixed order.
  virtual NamedTensors Parameters() = 0;
  // Float tensors it keeps but does not train (BatchNorm running statistics; parameters a
  // TorchScript model has frozen with requires_grad=False), in a fixed order.
  virtual NamedTensors Buffers() = 0;
  // One output tensor for a batch; a model that returns anything else is an InvalidArgument.
  virtual absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& x) = 0;
  virtual void SetTraining(bool on) = 0;
};

// A built-in model, from the job's seed (torch::manual_seed first).
absl::StatusOr<std::unique_ptr<TrainableModel>> MakeTrainableModel(v1::ModelArch arch,
                                                                   const InputShape& shape);

// A user's TorchScript file. Refused, naming the file: what is not TorchScript (or not readable),
// and a model with no trainable parameter.
absl::StatusOr<std::unique_ptr<TrainableModel>> LoadTorchScriptModel(const std::string& path);

// Writes the TorchScript module at `model_path` with `weights` (by tensor name: every parameter
// and float buffer of the module) to `out`: the trained model back in the form its user loads
// with torch.jit.load. Every tensor is checked before anything is written.
absl::Status SaveTorchScriptWithWeights(
    const std::string& model_path, const std::vector<std::pair<std::string, torch::Tensor>>& weights,
    const std::string& out);

}  // namespace strata
