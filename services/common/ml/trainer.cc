#include "services/common/ml/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include <absl/strings/str_cat.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include "services/common/config/job_keys.h"
#include "services/common/ml/data_loader.h"
#include "services/common/ml/models.h"

namespace strata {
namespace {

std::vector<int64_t> Shape(const torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

template <typename F>
absl::Status CatchTorch(absl::string_view what, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

int ConfigureTorchThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  return threads;
}

TrainerOptions TrainerOptions::ForWorker(const v1::ResolvedJob& job) {
  TrainerOptions o;
  const v1::ResolvedTraining& t = job.training();
  o.arch = job.arch();
  o.torchscript = job.model().torchscript();
  o.loss = t.loss();
  o.batch_size = t.worker_batch();
  o.lr = t.lr();
  o.momentum = t.momentum();
  o.weight_decay = t.weight_decay();
  o.lr_milestones.assign(t.lr_milestones().begin(), t.lr_milestones().end());
  o.lr_gamma = t.lr_gamma();
  o.seed = t.seed();
  o.threads = t.threads_per_worker();
  return o;
}

TrainerOptions TrainerOptions::ForSingleProcess(const v1::ResolvedJob& job) {
  TrainerOptions o = ForWorker(job);
  o.batch_size = job.training().global_batch();
  o.threads = job.training().threads();
  return o;
}

struct Trainer::Impl {
  TrainerOptions options;
  std::shared_ptr<const Dataset> dataset;
  std::unique_ptr<TrainableModel> model;
  std::unique_ptr<DataLoader> loader;
  FlatLayout param_layout, buffer_layout;
  std::vector<torch::Tensor> params, buffers;  // in layout order
  torch::Tensor params_flat, grads_flat, velocity_flat;
  // The gradient listener (SetGradientListener) and the parameters' gradient accumulators its
  // hooks hang on: held here, as autograd keeps them only while a parameter's .grad is in use
  // by a graph, and every backward must find the same nodes with the hooks.
  const void* listener_owner = nullptr;
  std::function<void(size_t)> on_gradient_ready;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;

  // Autograd accumulates into an existing .grad in place, so the views set here stay the
  // gradients' storage. Re-attach if anything replaced them (then the next step still works).
  void AttachGradients() {
    for (size_t i = 0; i < params.size(); ++i) {
      const FlatEntry& e = param_layout.entries()[i];
      torch::Tensor view = grads_flat.narrow(0, e.offset, e.numel).view(params[i].sizes());
      if (!params[i].grad().defined() || params[i].grad().data_ptr() != view.data_ptr()) {
        params[i].mutable_grad() = view;
      }
    }
  }

  // A stolen gradient (not our view) would silently break synchronisation; copy it back.
  void ReclaimGradient(size_t i) {
    const FlatEntry& e = param_layout.entries()[i];
    torch::Tensor view = grads_flat.narrow(0, e.offset, e.numel);
    if (params[i].grad().data_ptr() != view.data_ptr()) {
      view.copy_(params[i].grad().reshape({-1}));
      params[i].mutable_grad() = view.view(params[i].sizes());
    }
  }

  // Once: a post hook on every parameter's gradient accumulator, run after it has added the
  // parameter's gradient (the way PyTorch's DDP finds gradients that are ready).
  void HookGradientAccumulators() {
    if (!accumulators.empty()) return;
    for (size_t i = 0; i < params.size(); ++i) {
      std::shared_ptr<torch::autograd::Node> node =
          torch::autograd::impl::grad_accumulator(params[i]);
      node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list&) {
            if (on_gradient_ready) {
              ReclaimGradient(i);
              on_gradient_ready(i);
            }
            return outputs;
          }));
      accumulators.push_back(std::move(node));
    }
  }

  // The loss of `out` against the batch's labels or targets (its mean, or its sum), and the
  // counts behind accuracy and RMSE in `stats`.
  torch::Tensor ScoreBatch(torch::Tensor out, const torch::Tensor& y, bool sum, StepStats* stats) {
    namespace F = torch::nn::functional;
    const auto reduction = sum ? torch::Reduction::Sum : torch::Reduction::Mean;
    stats->examples = y.size(0);
    if (options.loss == v1::LOSS_CROSS_ENTROPY) {
      F::CrossEntropyFuncOptions reduce;
      if (sum) reduce.reduction(torch::kSum);
      torch::Tensor loss = F::cross_entropy(out, y, reduce);
      stats->correct = out.argmax(1).eq(y).sum().item<int64_t>();
      stats->scored = stats->examples;
      return loss;
    }
    // A model's [N, 1] output for [N] targets, and the like: the same values, another shape.
    if (out.sizes() != y.sizes() && out.numel() == y.numel()) out = out.reshape(y.sizes());
    torch::Tensor target = y.to(out.scalar_type());
    if (options.loss == v1::LOSS_MSE) {
      torch::Tensor loss = torch::mse_loss(out, target, reduction);
      stats->squared_error = (out.detach() - target).pow(2).sum().item<double>();
      return loss;
    }
    torch::Tensor loss = torch::binary_cross_entropy_with_logits(out, target, {}, {}, reduction);
    stats->correct = out.detach().gt(0).eq(target.gt(0.5)).sum().item<int64_t>();
    stats->scored = target.numel();
    return loss;
  }

  absl::StatusOr<StepStats> Step(const Batch& batch) {
    StepStats stats;
    absl::Status status = CatchTorch("training step", [&] {
      model->SetTraining(true);
      grads_flat.zero_();
      AttachGradients();
    });
    if (!status.ok()) return status;
    auto out = model->Forward(batch.x);
    if (!out.ok()) return out.status();
    status = CatchTorch("training step", [&] {
      torch::Tensor loss = ScoreBatch(*out, batch.y, /*sum=*/false, &stats);
      loss.backward();
      stats.loss = loss.item<double>();
    });
    if (!status.ok()) return status;
    for (size_t i = 0; i < params.size(); ++i) ReclaimGradient(i);
    return stats;
  }
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options,
                                                         std::shared_ptr<const Dataset> dataset) {
  if (options.batch_size < 1) return absl::InvalidArgumentError("batch size must be >= 1");
  for (int64_t e : options.shard) {
    if (e < 0 || static_cast<size_t>(e) >= dataset->train.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard index ", e,
                                                     " outside the training split of ",
                                                     dataset->train.size(), " examples"));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->dataset = std::move(dataset);
  const Dataset& d = *impl->dataset;
  torch::manual_seed(options.seed);
  // A user's model brings its own initial weights (every replica loads the same file); a
  // built-in one is initialised from the seed.
  auto model =
      options.torchscript.empty()
          ? MakeTrainableModel(options.arch, {d.channels, d.height, d.width, d.num_classes})
          : LoadTorchScriptModel(options.torchscript);
  if (!model.ok()) return model.status();
  impl->model = *std::move(model);

  std::vector<TensorSpec> param_specs, buffer_specs;
  for (const auto& [name, tensor] : impl->model->Parameters()) {
    if (tensor.scalar_type() != torch::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is ", c10::toString(tensor.scalar_type()),
                       "; Strata trains float32 models (call model.float() before saving it)"));
    }
    param_specs.push_back({name, Shape(tensor), DType::kFloat32});
    impl->params.push_back(tensor);
  }
  for (const auto& [name, tensor] : impl->model->Buffers()) {
    // Integer buffers (BatchNorm's num_batches_tracked) only matter without a momentum, which
    // BatchNorm layers have by default; they are neither sent nor averaged.
    if (tensor.scalar_type() != torch::kFloat32) continue;
    buffer_specs.push_back({name, Shape(tensor), DType::kFloat32});
    impl->buffers.push_back(tensor);
  }
  auto params = FlatLayout::Create(param_specs);
  if (!params.ok()) return params.status();
  auto buffers = FlatLayout::Create(buffer_specs);
  if (!buffers.ok()) return buffers.status();
  impl->param_layout = std::move(*params);
  impl->buffer_layout = std::move(*buffers);

  const int64_t total = static_cast<int64_t>(impl->param_layout.total_floats());
  absl::Status status = CatchTorch("building the fused buffer", [&] {
    impl->params_flat = torch::empty({total});
    // One spare float after the gradients: room for a value that travels with them in one
    // all-reduce (the ring's switch vote) without copying the gradients elsewhere.
    impl->grads_flat = torch::zeros({total + 1});
    impl->velocity_flat = torch::zeros({total});
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < impl->params.size(); ++i) {
      const FlatEntry& e = impl->param_layout.entries()[i];
      torch::Tensor slice = impl->params_flat.narrow(0, e.offset, e.numel);
      slice.copy_(impl->params[i].reshape({-1}));
      impl->params[i].set_data(slice.view(impl->params[i].sizes()));
    }
    impl->AttachGradients();
  });
  if (!status.ok()) return status;

  LoaderOptions loader;
  loader.batch_size = options.batch_size;
  loader.seed = options.seed;
  loader.augment = options.augment;
  impl->loader = std::make_unique<DataLoader>(d, d.train, options.shard, loader);
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

const TrainerOptions& Trainer::options() const { return impl_->options; }
const Dataset& Trainer::dataset() const { return *impl_->dataset; }
int64_t Trainer::parameter_count() const {
  return static_cast<int64_t>(impl_->param_layout.total_floats());
}
const FlatLayout& Trainer::parameters() const { return impl_->param_layout; }
float* Trainer::parameter_data() { return impl_->params_flat.data_ptr<float>(); }
float* Trainer::gradient_data() { return impl_->grads_flat.data_ptr<float>(); }

void Trainer::SetGradientListener(const void* owner, std::function<void(size_t)> on_ready) {
  impl_->HookGradientAccumulators();
  impl_->listener_owner = owner;
  impl_->on_gradient_ready = std::move(on_ready);
}

void Trainer::RemoveGradientListener(const void* owner) {
  if (impl_->listener_owner != owner) return;
  impl_->listener_owner = nullptr;
  impl_->on_gradient_ready = nullptr;
}
float* Trainer::velocity_data() { return impl_->velocity_flat.data_ptr<float>(); }
const FlatLayout& Trainer::buffers() const { return impl_->buffer_layout; }

void Trainer::CopyBuffersTo(float* out) const {
  for (size_t i = 0; i < impl_->buffers.size(); ++i) {
    const FlatEntry& e = impl_->buffer_layout.entries()[i];
    std::memcpy(out + e.offset, impl_->buffers[i].contiguous().data_ptr<float>(),
                e.numel * sizeof(float));
  }
}

void Trainer::SetBuffersFrom(const float* in) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < impl_->buffers.size(); ++i) {
    const FlatEntry& e = impl_->buffer_layout.entries()[i];
    std::memcpy(impl_->buffers[i].data_ptr<float>(), in + e.offset, e.numel * sizeof(float));
  }
}

void Trainer::StartEpoch(int64_t epoch) { impl_->loader->StartEpoch(epoch); }
int64_t Trainer::batches_per_epoch() const { return impl_->loader->batches_per_epoch(); }
int64_t Trainer::shard_size() const { return impl_->loader->examples(); }
std::vector<int64_t> Trainer::BatchExamples(int64_t b) const {
  return impl_->loader->BatchIndices(b);
}

absl::StatusOr<StepStats> Trainer::ComputeGradients(int64_t b) {
  if (b < 0 || b >= batches_per_epoch()) {
    return absl::OutOfRangeError(absl::StrCat("batch ", b, " of ", batches_per_epoch()));
  }
  return impl_->Step(impl_->loader->GetBatch(b));
}

absl::StatusOr<StepStats> Trainer::ComputeGradientsOn(const std::vector<int64_t>& examples) {
  for (int64_t e : examples) {
    if (e < 0 || static_cast<size_t>(e) >= impl_->dataset->train.size()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", e, " outside the training split"));
    }
  }
  return impl_->Step(MakeBatch(*impl_->dataset, impl_->dataset->train, examples));
}

absl::StatusOr<StepStats> Trainer::ComputeGradientsFrom(const std::vector<float>& features,
                                                        const std::vector<int32_t>& labels) {
  const Dataset& d = *impl_->dataset;
  if (!d.class_labels() || labels.empty() ||
      features.size() != labels.size() * d.example_floats()) {
    return absl::InvalidArgumentError(absl::StrCat(
        labels.size(), " labels and ", features.size(), " features for examples of ",
        d.example_floats(), " features", d.class_labels() ? "" : " (the data set has no classes)"));
  }
  return impl_->Step(MakeBatchFrom(d, features, labels));
}

absl::StatusOr<std::vector<float>> Trainer::Predict(const std::vector<float>& features, int64_t n,
                                                    std::vector<int64_t>* shape) {
  const Dataset& d = *impl_->dataset;
  if (n <= 0 || features.size() != static_cast<size_t>(n) * d.example_floats()) {
    return absl::InvalidArgumentError(
        absl::StrCat(features.size(), " features for ", n, " examples of ", d.example_floats()));
  }
  impl_->model->SetTraining(false);
  torch::NoGradGuard no_grad;
  auto out = impl_->model->Forward(MakeInputFrom(d, features, n));
  if (!out.ok()) return out.status();
  std::vector<float> values;
  absl::Status status = CatchTorch("prediction", [&] {
    torch::Tensor o = out->to(torch::kFloat32).contiguous();
    shape->assign(o.sizes().begin(), o.sizes().end());
    values.assign(o.data_ptr<float>(), o.data_ptr<float>() + o.numel());
  });
  if (!status.ok()) return status;
  return values;
}

void Trainer::ApplyGradients(const SgdOptions& sgd) {
  SgdStep(parameter_data(), gradient_data(), velocity_data(), impl_->param_layout.total_floats(),
          sgd);
}

SgdOptions Trainer::SgdFor(double epoch) const {
  const TrainerOptions& o = impl_->options;
  return {static_cast<float>(ScheduledLearningRate(o.lr, o.lr_milestones, o.lr_gamma, epoch)),
          static_cast<float>(o.momentum), static_cast<float>(o.weight_decay)};
}

absl::StatusOr<EpochResult> Trainer::TrainEpoch(int64_t epoch, const StepProgressFn& progress) {
  StartEpoch(epoch);
  const SgdOptions sgd = SgdFor(static_cast<double>(epoch));
  const int64_t steps = batches_per_epoch();
  double loss_sum = 0;
  int64_t correct = 0, scored = 0, seen = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < steps; ++b) {
    auto stats = ComputeGradients(b);
    if (!stats.ok()) return stats.status();
    if (!std::isfinite(stats->loss)) {
      return absl::FailedPreconditionError(absl::StrCat("training diverged: loss ", stats->loss,
                                                        " at epoch ", epoch + 1, " step ", b,
                                                        "; lower training.lr"));
    }
    ApplyGradients(sgd);
    loss_sum += stats->loss * stats->examples;
    correct += stats->correct;
    scored += stats->scored;
    seen += stats->examples;
    if (progress) progress(b + 1, steps, loss_sum / seen);
  }
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto eval = Evaluate();
  if (!eval.ok()) return eval.status();
  EpochResult r;
  r.epoch = epoch + 1;
  r.lr = sgd.lr;
  r.train_loss = loss_sum / std::max<int64_t>(seen, 1);
  r.train_acc = static_cast<double>(correct) / std::max<int64_t>(scored, 1);
  r.val_loss = eval->loss;
  r.val_acc = eval->accuracy;
  r.train_s = train_s;
  r.samples_per_s = seen / std::max(train_s, 1e-9);
  return r;
}

absl::StatusOr<EvalResult> Trainer::Evaluate() {
  const Dataset& d = *impl_->dataset;
  const int64_t n = static_cast<int64_t>(d.test.size());
  EvalResult result;
  if (n == 0) return absl::FailedPreconditionError("the test split is empty");
  double loss_sum = 0, squared_error = 0;
  int64_t correct = 0, scored = 0;
  impl_->model->SetTraining(false);
  std::vector<int64_t> examples;
  for (int64_t begin = 0; begin < n; begin += impl_->options.eval_batch) {
    const int64_t end = std::min(n, begin + impl_->options.eval_batch);
    examples.resize(end - begin);
    std::iota(examples.begin(), examples.end(), begin);
    torch::NoGradGuard no_grad;
    Batch batch = MakeBatch(d, d.test, examples);
    auto out = impl_->model->Forward(batch.x);
    if (!out.ok()) return out.status();
    StepStats stats;
    absl::Status status = CatchTorch("evaluation", [&] {
      loss_sum += impl_->ScoreBatch(*out, batch.y, /*sum=*/true, &stats).item<double>();
    });
    if (!status.ok()) return status;
    correct += stats.correct;
    scored += stats.scored;
    squared_error += stats.squared_error;
  }
  // Per example for cross_entropy; per target value for mse and bce_with_logits, as their
  // training loss is.
  const int64_t values = n * std::max<int64_t>(1, static_cast<int64_t>(d.target_floats()));
  result.examples = n;
  result.loss = loss_sum / (d.class_labels() ? n : values);
  result.accuracy = scored > 0 ? static_cast<double>(correct) / scored : 0;
  result.rmse = impl_->options.loss == v1::LOSS_MSE ? std::sqrt(squared_error / values) : 0;
  return result;
}

absl::StatusOr<std::vector<int64_t>> Trainer::ProbeOutputShape() {
  const Dataset& d = *impl_->dataset;
  if (d.train.size() == 0) return absl::FailedPreconditionError("the training split is empty");
  impl_->model->SetTraining(false);
  torch::NoGradGuard no_grad;
  Batch batch = MakeBatch(d, d.train, {0});
  auto out = impl_->model->Forward(batch.x);
  if (!out.ok()) return out.status();
  return Shape(*out);
}

std::vector<NamedTensor> Trainer::ModelTensors() const {
  std::vector<NamedTensor> tensors;
  auto add = [&](const FlatEntry& e, const float* base) {
    NamedTensor t = NamedTensor::Zeros(e.spec);
    std::memcpy(t.data.data(), base + e.offset, e.numel * sizeof(float));
    tensors.push_back(std::move(t));
  };
  for (const auto& e : impl_->param_layout.entries()) add(e, impl_->params_flat.data_ptr<float>());
  std::vector<float> buffers(impl_->buffer_layout.total_floats());
  CopyBuffersTo(buffers.data());
  for (const auto& e : impl_->buffer_layout.entries()) add(e, buffers.data());
  return tensors;
}

Checkpoint Trainer::ToCheckpoint(int64_t epoch, int64_t step, int64_t version) const {
  Checkpoint c;
  c.epoch = epoch;
  c.step = step;
  c.version = version;
  c.extra = {{"arch", impl_->options.torchscript.empty() ? Spelled(impl_->options.arch)
                                                         : std::string("torchscript")},
             {"dataset", impl_->dataset->name}};
  // The model as ModelTensors copies it (parameters, then buffers), then the momentum.
  const size_t parameters = impl_->param_layout.entries().size();
  std::vector<NamedTensor> model = ModelTensors();
  for (size_t i = 0; i < model.size(); ++i) {
    c.entries.push_back(
        {i < parameters ? TensorKind::kParameter : TensorKind::kBuffer, std::move(model[i])});
  }
  const float* velocity = impl_->velocity_flat.data_ptr<float>();
  for (const auto& e : impl_->param_layout.entries()) {
    CheckpointEntry entry{TensorKind::kMomentum, NamedTensor::Zeros(e.spec)};
    std::memcpy(entry.tensor.data.data(), velocity + e.offset, e.numel * sizeof(float));
    c.entries.push_back(std::move(entry));
  }
  return c;
}

absl::Status Trainer::LoadCheckpoint(const Checkpoint& checkpoint) {
  // Validate everything first, so that a bad checkpoint changes nothing.
  auto find = [&](TensorKind kind, const FlatEntry& e,
                  bool required) -> absl::StatusOr<const float*> {
    const CheckpointEntry* found = checkpoint.Find(kind, e.spec.name);
    if (found == nullptr) {
      if (!required) return nullptr;
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint lacks ", TensorKindName(kind), " '", e.spec.name, "'"));
    }
    if (found->tensor.spec.shape != e.spec.shape || found->tensor.spec.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", TensorKindName(kind), " '", e.spec.name, "' has shape ",
          ShapeString(found->tensor.spec.shape), ", the model needs ", ShapeString(e.spec.shape)));
    }
    return found->tensor.floats();
  };
  std::vector<std::pair<const FlatEntry*, const float*>> params, velocity, buffers;
  for (const auto& e : impl_->param_layout.entries()) {
    auto p = find(TensorKind::kParameter, e, true);
    if (!p.ok()) return p.status();
    params.emplace_back(&e, *p);
    auto v = find(TensorKind::kMomentum, e, false);
    if (!v.ok()) return v.status();
    if (*v != nullptr) velocity.emplace_back(&e, *v);
  }
  for (const auto& e : impl_->buffer_layout.entries()) {
    auto b = find(TensorKind::kBuffer, e, true);
    if (!b.ok()) return b.status();
    buffers.emplace_back(&e, *b);
  }
  float* p = parameter_data();
  float* v = velocity_data();
  for (auto& [e, src] : params) std::memcpy(p + e->offset, src, e->numel * sizeof(float));
  if (velocity.size() == params.size()) {
    for (auto& [e, src] : velocity) std::memcpy(v + e->offset, src, e->numel * sizeof(float));
  }
  std::vector<float> flat(impl_->buffer_layout.total_floats());
  for (auto& [e, src] : buffers)
    std::memcpy(flat.data() + e->offset, src, e->numel * sizeof(float));
  SetBuffersFrom(flat.data());
  return absl::OkStatus();
}

absl::Status ExportTorchScript(const std::string& model_path, const Checkpoint& checkpoint,
                               const std::string& out) {
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  absl::Status status = CatchTorch("reading the trained weights", [&] {
    for (const CheckpointEntry& e : checkpoint.entries) {
      if (e.kind == TensorKind::kMomentum || e.tensor.spec.dtype != DType::kFloat32) continue;
      torch::Tensor t = torch::from_blob(const_cast<float*>(e.tensor.floats()), e.tensor.spec.shape,
                                         torch::kFloat32)
                            .clone();
      weights.emplace_back(e.tensor.name(), std::move(t));
    }
  });
  if (!status.ok()) return status;
  return SaveTorchScriptWithWeights(model_path, weights, out);
}

}  // namespace strata
