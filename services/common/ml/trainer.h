// The training loop's building blocks behind a header without LibTorch: the single-node trainer,
// the workers and the evaluator use it, and only trainer.cc pays LibTorch's compile cost.
//
// The model's trainable parameters, their gradients and the optimizer's velocity each live in one
// contiguous float buffer (the fused buffer, laid out by parameters()); the model's tensors are
// views into it, so synchronisers send and receive that buffer with no gather or scatter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/dataset.h"
#include "services/common/ml/sgd.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/flat_layout.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct TrainerOptions {
  v1::ModelArch arch = v1::MODEL_ARCH_MLP;
  std::string torchscript;  // a user's TorchScript file, trained instead of `arch`
  v1::Loss loss = v1::LOSS_CROSS_ENTROPY;
  int64_t batch_size = 128;  // this process's batch
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::vector<int32_t> lr_milestones;  // epochs after which lr *= lr_gamma
  double lr_gamma = 0.1;
  uint64_t seed = 1;           // model initialisation and data order
  int threads = 0;             // intra-op threads; 0 = all cores
  std::vector<int64_t> shard;  // training examples to use; empty = the whole training split
  bool augment = true;         // where the data set allows it (CIFAR)
  int64_t eval_batch = 1000;

  // The single-process trainer of a job (strata-train): the whole global batch, training.threads.
  static TrainerOptions ForSingleProcess(const v1::ResolvedJob& job);
  // One worker's trainer in a resolved job: its share of the global batch, the job's threads per
  // worker. The shard is the caller's.
  static TrainerOptions ForWorker(const v1::ResolvedJob& job);
};

struct StepStats {
  double loss = 0;  // mean over the batch
  // Predictions scored for accuracy and the right ones: one per example for cross_entropy, one
  // per label for bce_with_logits, none for mse.
  int64_t correct = 0, scored = 0;
  double squared_error = 0;  // mse: summed over every target value
  int64_t examples = 0;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // 0 for mse
  double rmse = 0;      // mse only
  int64_t examples = 0;
};

struct EpochResult {
  int64_t epoch = 0;  // 1-based: the number of completed epochs
  double lr = 0;
  double train_loss = 0, train_acc = 0;
  double val_loss = 0, val_acc = 0;
  double samples_per_s = 0;
  double train_s = 0;
};

// Called after each step with (step within the epoch, steps in the epoch, running mean loss).
using StepProgressFn = std::function<void(int64_t, int64_t, double)>;

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options,
                                                         std::shared_ptr<const Dataset> dataset);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  const TrainerOptions& options() const;
  const Dataset& dataset() const;
  int64_t parameter_count() const;

  // The fused buffers (parameters().total_floats() floats each; gradient_data() has one spare
  // float after the gradients, which a synchroniser may use).
  const FlatLayout& parameters() const;
  float* parameter_data();
  float* gradient_data();
  float* velocity_data();
  // Float buffers that are not trained (BatchNorm running statistics): copied, not viewed.
  const FlatLayout& buffers() const;
  void CopyBuffersTo(float* out) const;
  void SetBuffersFrom(const float* in);

  // Reshuffles the shard for `epoch` (0-based).
  void StartEpoch(int64_t epoch);
  int64_t batches_per_epoch() const;
  int64_t shard_size() const;

  // Zeroes the gradients, runs forward and backward on batch `b` of the current epoch.
  absl::StatusOr<StepStats> ComputeGradients(int64_t b);
  // The same on explicit examples of the training split (for reproducing a global batch).
  absl::StatusOr<StepStats> ComputeGradientsOn(const std::vector<int64_t>& examples);
  // The same on examples that are not in the data set (a stream's events): labels.size()
  // examples of the data set's shape in `features`, raw; the labels must be class labels of the
  // data set (the caller checked them: a stream's decoder refuses any other).
  absl::StatusOr<StepStats> ComputeGradientsFrom(const std::vector<float>& features,
                                                 const std::vector<int32_t>& labels);
  // The model's outputs (evaluation mode, no gradients) for `n` examples of the data set's shape
  // in `features`, raw: n x the output's size per example, the output's shape in *shape. The
  // caller checked the sizes and the values.
  absl::StatusOr<std::vector<float>> Predict(const std::vector<float>& features, int64_t n,
                                             std::vector<int64_t>* shape);
  // The example indices of batch `b` in the current epoch.
  std::vector<int64_t> BatchExamples(int64_t b) const;

  // Tells `on_ready(i)` during backward, on the thread that runs it, as soon as parameter i's
  // gradient (parameters() order) is complete in gradient_data(), so that a synchroniser can
  // reduce it while backward goes on. One listener at a time: a new one replaces the last.
  // RemoveGradientListener(owner) removes it only if `owner` set it, so that a synchroniser
  // destroyed after its successor was made leaves the successor's listener in place.
  void SetGradientListener(const void* owner, std::function<void(size_t)> on_ready);
  void RemoveGradientListener(const void* owner);

  // Local optimizer step on the fused buffers.
  void ApplyGradients(const SgdOptions& sgd);
  SgdOptions SgdFor(double epoch) const;  // lr from the schedule

  // One epoch of single-process training (local SGD after every batch).
  absl::StatusOr<EpochResult> TrainEpoch(int64_t epoch, const StepProgressFn& progress = {});
  absl::StatusOr<EvalResult> Evaluate();
  // The shape of the model's output for one example of the training split (in evaluation mode):
  // what `strata validate` compares with the labels and the loss.
  absl::StatusOr<std::vector<int64_t>> ProbeOutputShape();

  // The parameters then the buffers, copied: the model an evaluator scores (Worker.GetModel).
  std::vector<NamedTensor> ModelTensors() const;
  Checkpoint ToCheckpoint(int64_t epoch, int64_t step, int64_t version) const;
  // Loads parameters and buffers (and velocity, if present); every tensor must match.
  absl::Status LoadCheckpoint(const Checkpoint& checkpoint);

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes the user's TorchScript module at `model_path` with the parameters and buffers of
// `checkpoint` to `out` (`strata export`): the trained model in the form its user loads with
// torch.jit.load.
absl::Status ExportTorchScript(const std::string& model_path, const Checkpoint& checkpoint,
                               const std::string& out);

// Sets LibTorch's intra-op threads (0 = all cores); returns the number used.
int ConfigureTorchThreads(int threads);

}  // namespace strata
