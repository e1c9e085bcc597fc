#include "services/common/ml/models.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <torch/script.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "services/common/config/job_keys.h"

namespace strata {
namespace {

namespace nn = torch::nn;

class Mlp : public Net {
 public:
  Mlp(const InputShape& s, int64_t hidden1, int64_t hidden2) {
    const int64_t in = s.channels * s.height * s.width;
    fc1_ = register_module("fc1", nn::Linear(in, hidden1));
    fc2_ = register_module("fc2", nn::Linear(hidden1, hidden2));
    fc3_ = register_module("fc3", nn::Linear(hidden2, s.num_classes));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = x.flatten(1);
    x = torch::relu(fc1_->forward(x));
    x = torch::relu(fc2_->forward(x));
    return fc3_->forward(x);
  }

 private:
  nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

class SmallCnn : public Net {
 public:
  explicit SmallCnn(const InputShape& s) {
    conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(s.channels, 32, 3).padding(1)));
    conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
    const int64_t flat = 64 * (s.height / 4) * (s.width / 4);
    fc1_ = register_module("fc1", nn::Linear(flat, 128));
    fc2_ = register_module("fc2", nn::Linear(128, s.num_classes));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    x = torch::relu(fc1_->forward(x.flatten(1)));
    return fc2_->forward(x);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

nn::Conv2d Conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", Conv3x3(in, out, stride));
    bn1_ = register_module("bn1", nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", Conv3x3(out, out, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut_conv_ = register_module(
          "shortcut_conv", nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      shortcut_bn_ = register_module("shortcut_bn", nn::BatchNorm2d(out));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    torch::Tensor skip = shortcut_conv_ ? shortcut_bn_->forward(shortcut_conv_->forward(x)) : x;
    return torch::relu(y + skip);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_conv_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, shortcut_bn_{nullptr};
};

// ResNet v1 for small images: depth = 6n + 2, three stages of n blocks with 16, 32, 64 channels.
class ResNet : public Net {
 public:
  ResNet(const InputShape& s, int blocks_per_stage) {
    conv_ = register_module("conv", Conv3x3(s.channels, 16, 1));
    bn_ = register_module("bn", nn::BatchNorm2d(16));
    layers_ = register_module("layers", nn::Sequential());
    int64_t in = 16;
    for (int64_t out : {16, 32, 64}) {
      for (int b = 0; b < blocks_per_stage; ++b) {
        const int64_t stride = (b == 0 && out != 16) ? 2 : 1;
        layers_->push_back(std::make_shared<BasicBlock>(in, out, stride));
        in = out;
      }
    }
    fc_ = register_module("fc", nn::Linear(64, s.num_classes));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      }
    }
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn_->forward(conv_->forward(x)));
    x = layers_->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_->forward(x);
  }

 private:
  nn::Conv2d conv_{nullptr};
  nn::BatchNorm2d bn_{nullptr};
  nn::Sequential layers_{nullptr};
  nn::Linear fc_{nullptr};
};

}  // namespace

absl::StatusOr<std::shared_ptr<Net>> MakeModel(v1::ModelArch arch, const InputShape& shape) {
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1 || shape.num_classes < 2) {
    return absl::InvalidArgumentError("model input shape and class count must be positive");
  }
  const bool spatial = shape.height >= 8 && shape.width >= 8;
  const std::string name = Spelled(arch);
  const bool convolutional = arch != v1::MODEL_ARCH_MLP && arch != v1::MODEL_ARCH_MLP_WIDE;
  if (!spatial && convolutional) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", name, "' needs images of at least 8x8, the data set has ",
                     shape.height, "x", shape.width, "; use mlp"));
  }
  try {
    switch (arch) {
      case v1::MODEL_ARCH_MLP:
        return std::shared_ptr<Net>(std::make_shared<Mlp>(shape, 256, 128));
      // Communication-heavy: 23 MB of gradients for ~35 MFLOP per example (docs/benchmarks.md).
      case v1::MODEL_ARCH_MLP_WIDE:
        return std::shared_ptr<Net>(std::make_shared<Mlp>(shape, 2048, 2048));
      case v1::MODEL_ARCH_CNN:
        return std::shared_ptr<Net>(std::make_shared<SmallCnn>(shape));
      case v1::MODEL_ARCH_RESNET20:
        return std::shared_ptr<Net>(std::make_shared<ResNet>(shape, 3));
      case v1::MODEL_ARCH_RESNET32:
        return std::shared_ptr<Net>(std::make_shared<ResNet>(shape, 5));
      case v1::MODEL_ARCH_RESNET56:
        return std::shared_ptr<Net>(std::make_shared<ResNet>(shape, 9));
      default:
        break;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("building model '", name, "': ", e.what_without_backtrace()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown model ", static_cast<int>(arch)));
}

int64_t CountParameters(const torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

namespace {

// The first line of an exception's text: LibTorch's messages carry a C++ backtrace and, for
// TorchScript, the serialized code around the error, which a user's terminal does not need.
std::string FirstLine(const std::exception& e) {
  std::string what = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) what = c10->what_without_backtrace();
  const size_t line_end = what.find('\n');
  return line_end == std::string::npos ? what : what.substr(0, line_end);
}

class BuiltinModel final : public TrainableModel {
 public:
  explicit BuiltinModel(std::shared_ptr<Net> net) : net_(std::move(net)) {}
  NamedTensors Parameters() override {
    NamedTensors out;
    for (const auto& item : net_->named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  NamedTensors Buffers() override {
    NamedTensors out;
    for (const auto& item : net_->named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& x) override {
    try {
      return net_->forward(x);
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat("forward pass: ", e.what_without_backtrace()));
    }
  }
  void SetTraining(bool on) override { net_->train(on); }

 private:
  std::shared_ptr<Net> net_;
};

class TorchScriptModel final : public TrainableModel {
 public:
  TorchScriptModel(torch::jit::Module module, std::string path)
      : module_(std::move(module)), path_(std::move(path)) {}
  NamedTensors Parameters() override {
    NamedTensors out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (p.value.requires_grad()) out.emplace_back(p.name, p.value);
    }
    return out;
  }
  // Frozen parameters travel as buffers: every replica keeps them equal, none trains them.
  NamedTensors Buffers() override {
    NamedTensors out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (!p.value.requires_grad()) out.emplace_back(p.name, p.value);
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) out.emplace_back(b.name, b.value);
    return out;
  }
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& x) override {
    torch::jit::IValue y;
    try {
      y = module_.forward({x});
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": the model's forward pass failed on input ",
                       absl::StrJoin(x.sizes(), "x"), ": ", FirstLine(e)));
    }
    if (!y.isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": forward returns a ", y.tagKind(),
          ", not one tensor; return the logits (or the predictions) alone"));
    }
    return y.toTensor();
  }
  void SetTraining(bool on) override { module_.train(on); }

 private:
  torch::jit::Module module_;
  std::string path_;
};

absl::StatusOr<torch::jit::Module> LoadModule(const std::string& path) {
  // The profiling executor (LibTorch's default) re-specialises the graph
  // while it trains and ran ResNet-20 at 0.46-0.76x the built-in twin's
  // speed; the legacy executor runs it at the twin's speed (measured in
  // docs/benchmarks.md). The switch is process-wide, so it is set once.
  static std::once_flag legacy_executor;
  std::call_once(legacy_executor, [] { torch::jit::getProfilingMode() = false; });
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such TorchScript file"));
  }
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": not a TorchScript file (save the model with torch.jit.script(model).save(path) or "
        "torch.jit.trace(model, example).save(path)): ",
        FirstLine(e)));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainableModel>> MakeTrainableModel(v1::ModelArch arch,
                                                                   const InputShape& shape) {
  auto net = MakeModel(arch, shape);
  if (!net.ok()) return net.status();
  return std::unique_ptr<TrainableModel>(std::make_unique<BuiltinModel>(*std::move(net)));
}

absl::StatusOr<std::unique_ptr<TrainableModel>> LoadTorchScriptModel(const std::string& path) {
  auto module = LoadModule(path);
  if (!module.ok()) return module.status();
  auto model = std::make_unique<TorchScriptModel>(*std::move(module), path);
  if (model->Parameters().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the model has no trainable parameter (none with requires_grad): nothing to "
              "train"));
  }
  return std::unique_ptr<TrainableModel>(std::move(model));
}

absl::Status SaveTorchScriptWithWeights(
    const std::string& model_path, const std::vector<std::pair<std::string, torch::Tensor>>& weights,
    const std::string& out) {
  auto module = LoadModule(model_path);
  if (!module.ok()) return module.status();
  std::map<std::string, torch::Tensor> by_name(weights.begin(), weights.end());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // destination, source
  auto take = [&](const std::string& name, const torch::Tensor& into) -> absl::Status {
    if (!into.is_floating_point()) return absl::OkStatus();  // num_batches_tracked
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the trained weights hold no tensor '", name, "' of ", model_path));
    }
    if (it->second.sizes() != into.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' is ", absl::StrJoin(it->second.sizes(), "x"), " in the weights, ",
          absl::StrJoin(into.sizes(), "x"), " in ", model_path));
    }
    copies.emplace_back(into, it->second);
    return absl::OkStatus();
  };
  for (const auto& p : module->named_parameters(/*recurse=*/true)) {
    if (absl::Status s = take(p.name, p.value); !s.ok()) return s;
  }
  for (const auto& b : module->named_buffers(/*recurse=*/true)) {
    if (absl::Status s = take(b.name, b.value); !s.ok()) return s;
  }
  const std::string tmp = out + ".tmp";
  try {
    torch::NoGradGuard no_grad;
    for (auto& [into, from] : copies) into.copy_(from);
    module->save(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing ", out, ": ", FirstLine(e)));
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", out));
  }
  return absl::OkStatus();
}

}  // namespace strata
