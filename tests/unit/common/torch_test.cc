// LibTorch-dependent tests of services/common, in one executable (each LibTorch process start
// costs ~0.5 s and ~160 MB).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "services/common/config/job_keys.h"
#include "services/common/ml/data_loader.h"
#include "services/common/ml/models.h"
#include "services/common/ml/sgd.h"
#include "services/common/ml/trainer.h"

namespace strata {
namespace {

v1::ModelArch Arch(const std::string& name) { return *EnumFromSpelling<v1::ModelArch>(name); }

int64_t Params(const std::string& arch, InputShape shape) {
  auto model = MakeModel(Arch(arch), shape);
  EXPECT_TRUE(model.ok()) << model.status();
  return CountParameters(**model);
}

TEST(Models, ParameterCountsMatchThePapers) {
  const InputShape cifar{3, 32, 32, 10};
  // He et al. 2016, table 6: 0.27M, 0.46M, 0.85M (projection shortcuts add a little).
  EXPECT_NEAR(Params("resnet20", cifar), 0.27e6, 0.01e6);
  EXPECT_NEAR(Params("resnet32", cifar), 0.46e6, 0.015e6);
  EXPECT_NEAR(Params("resnet56", cifar), 0.85e6, 0.025e6);
  EXPECT_EQ(Params("mlp", {1, 28, 28, 10}), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(Params("mlp_wide", {1, 28, 28, 10}),
            784 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10);
  // The class count sizes the last layer only.
  EXPECT_EQ(Params("resnet20", {3, 32, 32, 100}) - Params("resnet20", cifar), 90 * 64 + 90);
}

TEST(Models, OutputShapesForEveryArchAndInput) {
  for (const std::string arch : {"mlp", "cnn", "resnet20", "resnet32"}) {
    for (InputShape s : {InputShape{1, 28, 28, 10}, InputShape{3, 32, 32, 100}}) {
      auto model = MakeModel(Arch(arch), s);
      ASSERT_TRUE(model.ok()) << arch;
      (*model)->eval();
      torch::Tensor out = (*model)->forward(torch::randn({2, s.channels, s.height, s.width}));
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, s.num_classes})) << arch;
    }
  }
}

TEST(Models, RefusesUnknownArchAndTooSmallImages) {
  auto unknown = MakeModel(static_cast<v1::ModelArch>(99), {1, 28, 28, 10});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown model 99"), std::string::npos);
  auto tiny = MakeModel(v1::MODEL_ARCH_RESNET20, {1, 1, 32, 4});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("use mlp"), std::string::npos);
  EXPECT_TRUE(MakeModel(v1::MODEL_ARCH_MLP, {1, 1, 32, 4}).ok());
}

Dataset TinyImages(int64_t n, bool augment) {
  Dataset d;
  d.name = "tiny";
  d.channels = 3;
  d.height = d.width = 8;
  d.num_classes = 4;
  d.mean = {0.5f, 0.5f, 0.5f};
  d.stddev = {0.25f, 0.25f, 0.25f};
  d.augment = augment;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < 3 * 8 * 8; ++k) d.train.features.push_back(((i * 7 + k) % 11) / 10.0f);
    d.train.labels.push_back(static_cast<int32_t>(i % 4));
  }
  d.test = d.train;
  return d;
}

TEST(DataLoader, DeterministicPerSeedAndEpochAndCoversTheShard) {
  Dataset d = TinyImages(50, /*augment=*/true);
  std::vector<int64_t> shard;
  for (int64_t i = 0; i < 50; i += 2) shard.push_back(i);  // 25 examples
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = 3;
  o.augment = true;
  DataLoader a(d, d.train, shard, o), b(d, d.train, shard, o);
  EXPECT_EQ(a.batches_per_epoch(), 4);
  a.StartEpoch(2);
  b.StartEpoch(2);
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < a.batches_per_epoch(); ++i) {
    Batch x = a.GetBatch(i), y = b.GetBatch(i);
    EXPECT_TRUE(torch::equal(x.x, y.x));
    EXPECT_TRUE(torch::equal(x.y, y.y));
    auto idx = a.BatchIndices(i);
    seen.insert(seen.end(), idx.begin(), idx.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, shard);  // every shard example exactly once per epoch
  b.StartEpoch(3);
  EXPECT_NE(a.BatchIndices(0), b.BatchIndices(0));  // reshuffled every epoch
  o.seed = 4;
  DataLoader c(d, d.train, shard, o);
  c.StartEpoch(2);
  EXPECT_NE(a.BatchIndices(0), c.BatchIndices(0));
}

TEST(DataLoader, NormalisesWithoutAugmentation) {
  Dataset d = TinyImages(4, /*augment=*/false);
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  o.augment = true;  // ignored: the data set does not allow it
  DataLoader loader(d, d.train, {}, o);
  Batch b = loader.GetBatch(0);
  EXPECT_FLOAT_EQ(b.x[0][0][0][0].item<float>(), (d.train.features[0] - 0.5f) / 0.25f);
  EXPECT_EQ(b.y[1].item<int64_t>(), 1);
}

// Our flat-buffer SGD must be torch.optim.SGD step for step: the parameter servers, the ring and
// the single-node trainer all rely on it.
TEST(Sgd, MatchesTorchOptimSgdOnARealModel) {
  const InputShape shape{1, 28, 28, 10};
  torch::manual_seed(5);
  auto reference = *MakeModel(v1::MODEL_ARCH_CNN, shape);
  torch::manual_seed(5);
  auto ours = *MakeModel(v1::MODEL_ARCH_CNN, shape);
  torch::optim::SGD optimizer(reference->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  std::vector<torch::Tensor> velocity;
  for (auto& p : ours->parameters()) velocity.push_back(torch::zeros_like(p));
  torch::manual_seed(9);
  for (int step = 0; step < 5; ++step) {
    torch::Tensor x = torch::randn({8, 1, 28, 28});
    torch::Tensor y = torch::randint(0, 10, {8});
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
    optimizer.step();
    ours->zero_grad();
    torch::nn::functional::cross_entropy(ours->forward(x), y).backward();
    auto params = ours->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      torch::NoGradGuard no_grad;
      SgdStep(params[i].data_ptr<float>(), params[i].grad().data_ptr<float>(),
              velocity[i].data_ptr<float>(), params[i].numel(), {0.05f, 0.9f, 1e-3f});
    }
  }
  auto a = reference->parameters(), b = ours->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

// 64 one-channel 8x8 images whose class shows as a bright row: learnable in a few epochs.
std::shared_ptr<const Dataset> TinyFashion() {
  Dataset d;
  d.name = "tiny";
  d.channels = 1;
  d.height = d.width = 8;
  d.num_classes = 4;
  d.mean = {0.5f};
  d.stddev = {0.25f};
  for (int64_t i = 0; i < 64; ++i) {
    const int32_t label = static_cast<int32_t>(i % 4);
    for (int64_t k = 0; k < 64; ++k) {
      const bool bright = k / 8 == label * 2;
      d.train.features.push_back(bright ? 0.9f : ((i * 7 + k) % 5) / 10.0f);
    }
    d.train.labels.push_back(label);
  }
  d.test = d.train;
  return std::make_shared<const Dataset>(std::move(d));
}

TEST(Trainer, GradientsLandInTheFusedBufferAndTrainingLearns) {
  TrainerOptions o;
  o.arch = v1::MODEL_ARCH_CNN;
  o.batch_size = 16;
  o.lr = 0.05;
  auto trainer = Trainer::Create(o, TinyFashion());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  EXPECT_EQ(static_cast<size_t>(t.parameter_count()), t.parameters().total_floats());
  t.StartEpoch(0);
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_TRUE(t.ComputeGradients(0).ok());
    const float* g = t.gradient_data();
    double norm = 0;
    for (size_t i = 0; i < t.parameters().total_floats(); ++i) norm += double(g[i]) * g[i];
    EXPECT_GT(norm, 0.0) << "gradients did not reach the fused buffer (repetition " << rep << ")";
  }
  // Gradients are recomputed, not accumulated, across steps.
  std::vector<float> g1(t.gradient_data(), t.gradient_data() + t.parameters().total_floats());
  ASSERT_TRUE(t.ComputeGradients(0).ok());
  EXPECT_EQ(std::memcmp(g1.data(), t.gradient_data(), g1.size() * 4), 0);
  // Writing the fused parameter buffer changes the model (it is the model's storage).
  auto before = t.Evaluate();
  std::vector<float> saved(t.parameter_data(), t.parameter_data() + g1.size());
  std::fill(t.parameter_data(), t.parameter_data() + g1.size(), 0.0f);
  auto zeroed = t.Evaluate();
  EXPECT_NE(before->loss, zeroed->loss);
  std::copy(saved.begin(), saved.end(), t.parameter_data());
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 15; ++epoch) {
    auto r = t.TrainEpoch(epoch);
    ASSERT_TRUE(r.ok()) << r.status();
    if (epoch == 0) first = r->train_loss;
    last = r->train_loss;
  }
  EXPECT_LT(last, first * 0.7);
}

// What the overlapped all-reduce relies on: during backward every parameter is reported once,
// its gradient already final in the fused buffer when it is, the last layers first; a listener is
// removed only by its owner.
TEST(Trainer, TheGradientListenerHearsEveryParameterOnceWithItsFinalGradient) {
  TrainerOptions o;
  o.arch = v1::MODEL_ARCH_CNN;
  o.batch_size = 16;
  auto trainer = Trainer::Create(o, TinyFashion());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  const std::vector<FlatEntry>& entries = t.parameters().entries();
  std::vector<size_t> order;
  std::vector<std::vector<float>> at_report(entries.size());
  int owner = 0, other = 0;
  t.SetGradientListener(&owner, [&](size_t i) {
    order.push_back(i);
    const float* g = t.gradient_data() + entries[i].offset;
    at_report[i].assign(g, g + entries[i].numel);
  });
  t.StartEpoch(0);
  for (int rep = 0; rep < 2; ++rep) {
    order.clear();
    ASSERT_TRUE(t.ComputeGradients(rep).ok());
    ASSERT_EQ(order.size(), entries.size()) << "repetition " << rep;
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i) << "reported twice or never";
    EXPECT_EQ(order.front(), entries.size() - 1) << "the head's parameters come first";
    for (size_t i = 0; i < entries.size(); ++i) {
      const float* g = t.gradient_data() + entries[i].offset;
      EXPECT_EQ(std::memcmp(at_report[i].data(), g, entries[i].numel * sizeof(float)), 0)
          << "parameter " << i << " changed after it was reported";
    }
  }
  t.RemoveGradientListener(&other);  // not its owner: stays
  order.clear();
  ASSERT_TRUE(t.ComputeGradients(0).ok());
  EXPECT_EQ(order.size(), entries.size());
  t.RemoveGradientListener(&owner);
  order.clear();
  ASSERT_TRUE(t.ComputeGradients(0).ok());
  EXPECT_TRUE(order.empty());
}

TEST(Trainer, CheckpointRoundTripAndRefusalChangesNothing) {
  TrainerOptions o;
  o.arch = v1::MODEL_ARCH_RESNET20;
  o.batch_size = 8;
  auto shared = TinyFashion();
  auto a = *Trainer::Create(o, shared);
  a->StartEpoch(0);
  ASSERT_TRUE(a->ComputeGradients(0).ok());
  a->ApplyGradients(a->SgdFor(0));  // moves weights, velocity and BatchNorm statistics
  Checkpoint c = a->ToCheckpoint(1, 1, 1);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata-trainer-" + std::to_string(::getpid()) + ".ckpt"))
                               .string();
  ASSERT_TRUE(WriteCheckpoint(path, c).ok());
  auto loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok());
  o.seed = 99;  // different initial weights
  auto b = *Trainer::Create(o, shared);
  ASSERT_TRUE(b->LoadCheckpoint(*loaded).ok());
  const size_t n = a->parameters().total_floats();
  EXPECT_EQ(std::memcmp(a->parameter_data(), b->parameter_data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(a->velocity_data(), b->velocity_data(), n * 4), 0);
  std::vector<float> ba(a->buffers().total_floats()), bb(ba.size());
  a->CopyBuffersTo(ba.data());
  b->CopyBuffersTo(bb.data());
  EXPECT_EQ(ba, bb);
  EXPECT_EQ(a->Evaluate()->loss, b->Evaluate()->loss);

  // A checkpoint of another model is refused and leaves the trainer as it was.
  TrainerOptions mlp = o;
  mlp.arch = v1::MODEL_ARCH_MLP;
  auto c2 = *Trainer::Create(mlp, shared);
  std::vector<float> before(c2->parameter_data(),
                            c2->parameter_data() + c2->parameters().total_floats());
  absl::Status refused = c2->LoadCheckpoint(*loaded);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("fc1.weight"), std::string::npos) << refused;
  EXPECT_EQ(std::memcmp(before.data(), c2->parameter_data(), before.size() * 4), 0);
  std::filesystem::remove(path);
}

TEST(Trainer, RefusesShardOutsideTheData) {
  TrainerOptions o;
  o.shard = {0, 1, 1000};
  auto t = Trainer::Create(o, TinyFashion());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("shard index 1000"), std::string::npos);
}

}  // namespace
}  // namespace strata
