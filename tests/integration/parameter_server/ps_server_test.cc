// strata-ps as a real process on loopback: the optimizer arithmetic, refusal of every kind of bad
// push (the model stays unchanged and other workers keep being served), BSP rounds, the SSP
// bound, checkpoints (whole model and partition), progress and Stop.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include <absl/strings/numbers.h>
#include <absl/strings/strip.h>

#include "services/common/base/files.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/ml/sgd.h"
#include "services/common/wire/partition_plan.h"
#include "services/common/wire/rpc_auth.h"
#include "services/parameter_server/ps_process.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

constexpr char kTraining[] =
    "{ lr: 0.1, momentum: 0.9, weight_decay: 0.01, batch_size: 8, epochs: 1 }";

class PsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = WriteJobSpec(dir_, kTraining);
    model_ = SmallModel::Make(/*with_momentum=*/true);
    checkpoint_ = dir_ / "model.ckpt";
    ASSERT_TRUE(WriteCheckpoint(checkpoint_, model_.ToCheckpoint(/*version=*/5)).ok());
  }

  std::unique_ptr<PsProcess> Launch(PsProcessOptions o) {
    o.binary = STRATA_PS_BINARY;
    o.work_dir = dir_.path();
    if (o.config.empty()) o.config = config_;
    // The checkpoint RPCs take only paths inside the server's --run-dir.
    if (std::find(o.extra_args.begin(), o.extra_args.end(), "--run-dir") == o.extra_args.end()) {
      o.extra_args.insert(o.extra_args.end(), {"--run-dir", dir_.path()});
    }
    auto p = PsProcess::Launch(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  std::unique_ptr<PsProcess> LaunchLoaded(int workers = 2, const std::string& consistency = "asp",
                                          int staleness = -1, int64_t train_examples = 1000) {
    PsProcessOptions o;
    o.workers = workers;
    o.consistency = consistency;
    o.staleness = staleness;
    o.train_examples = train_examples;
    o.init_checkpoint = checkpoint_;
    return Launch(o);
  }

  // Gradients for every tensor of the small model (buffers carry values).
  std::vector<NamedTensor> Gradients(float scale) const {
    std::vector<NamedTensor> out;
    for (const auto& p : model_.params)
      out.push_back(Filled(p.name(), p.spec.shape, scale, scale * 0.01f));
    for (const auto& b : model_.buffers)
      out.push_back(Filled(b.name(), b.spec.shape, scale * 3, 0.0f));
    return out;
  }
  std::vector<v1::PushRequest> PushOf(int worker, int64_t version,
                                      const std::vector<NamedTensor>& tensors,
                                      int64_t samples = 4) const {
    std::vector<v1::PushRequest> m = {Header(worker, version, samples)};
    for (auto& c : Chunks(tensors)) m.push_back(std::move(c));
    return m;
  }

  // The starting model after the given SGD steps, computed here, equals what the server sent.
  void ExpectParametersAfter(
      const std::vector<std::pair<const std::vector<NamedTensor>*, SgdOptions>>& steps,
      const Pulled& got_model) const {
    for (size_t i = 0; i < model_.params.size(); ++i) {
      NamedTensor p = model_.params[i], v = model_.momentum[i];
      const size_t n = static_cast<size_t>(p.spec.numel());
      for (const auto& [gradients, sgd] : steps)
        SgdStep(p.floats(), (*gradients)[i].floats(), v.floats(), n, sgd);
      const NamedTensor* got = got_model.Find(p.name());
      ASSERT_NE(got, nullptr) << p.name();
      for (size_t k = 0; k < n; ++k)
        EXPECT_FLOAT_EQ(got->floats()[k], p.floats()[k]) << p.name() << "[" << k << "]";
    }
  }

  ScratchDir dir_;
  std::string config_, checkpoint_;
  SmallModel model_;
};

void ExpectSameModel(const Pulled& a, const Pulled& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name(), b.tensors[i].name());
    EXPECT_EQ(a.tensors[i].data, b.tensors[i].data) << a.tensors[i].name();
  }
}

TEST_F(PsServerTest, AspAppliesSgdWithMomentumPerPushAndOverwritesBuffers) {
  auto ps = LaunchLoaded(/*workers=*/2);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto g1 = Gradients(0.5f), g2 = Gradients(-0.25f);
  Pulled after1 = RawPushPull(*stub, PushOf(0, 5, g1));
  ASSERT_TRUE(after1.status.ok()) << after1.status.error_message();
  EXPECT_EQ(after1.version, 6);
  Pulled after2 = RawPushPull(*stub, PushOf(1, 5, g2));  // one version stale
  ASSERT_TRUE(after2.status.ok()) << after2.status.error_message();
  EXPECT_EQ(after2.version, 7);

  // The same arithmetic locally: per-worker lr = 0.1 / 2 workers.
  const SgdOptions sgd{0.05f, 0.9f, 0.01f};
  ExpectParametersAfter({{&g1, sgd}, {&g2, sgd}}, after2);
  for (size_t i = 0; i < model_.buffers.size(); ++i) {
    const NamedTensor* got = after2.Find(model_.buffers[i].name());
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->data, g2[model_.params.size() + i].data)
        << "ASP overwrites buffers with the pushed value";
  }
  const v1::ServerStatus s = GetStatus(*stub);
  EXPECT_EQ(s.pushes(), 2);
  EXPECT_EQ(s.staleness_histogram(0), 1);
  EXPECT_EQ(s.staleness_histogram(1), 1);
  EXPECT_EQ(s.samples(), 8);
}

// A worker may ask for its own learning rate (Worker.Switch's lr): the push is applied at it, the
// next push without one at the server's rate again.
TEST_F(PsServerTest, AspAppliesAPushAtTheLearningRateItAsksFor) {
  auto ps = LaunchLoaded(/*workers=*/2);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto g1 = Gradients(0.5f), g2 = Gradients(-0.25f);
  auto own_rate = PushOf(0, 5, g1);
  own_rate[0].mutable_header()->set_lr(0.3);
  Pulled after1 = RawPushPull(*stub, own_rate);
  ASSERT_TRUE(after1.status.ok()) << after1.status.error_message();
  EXPECT_FLOAT_EQ(GetStatus(*stub).lr(), 0.3f);
  Pulled after2 = RawPushPull(*stub, PushOf(1, 6, g2));
  ASSERT_TRUE(after2.status.ok()) << after2.status.error_message();
  EXPECT_FLOAT_EQ(GetStatus(*stub).lr(), 0.05f);  // the server's: 0.1 / 2 workers

  const SgdOptions asked{0.3f, 0.9f, 0.01f}, servers{0.05f, 0.9f, 0.01f};
  ExpectParametersAfter({{&g1, asked}, {&g2, servers}}, after2);
}

// ---------------------------------------------------------------------------------------------
// Bad pushes: each is refused with INVALID_ARGUMENT, changes nothing, and the server keeps serving.

struct BadPush {
  std::string name;
  std::function<std::vector<v1::PushRequest>(const SmallModel&, std::vector<NamedTensor> good)>
      build;
  std::string message;  // a fragment the error must contain
};
void PrintTo(const BadPush& p, std::ostream* os) { *os << p.name; }

std::vector<v1::PushRequest> WithHeader(std::vector<v1::PushRequest> body, int64_t version = 5,
                                        int worker = 0) {
  body.insert(body.begin(), Header(worker, version));
  return body;
}

std::vector<BadPush> BadPushes() {
  return {
      {"UnknownTensor",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g[1].spec.name = "fc9.bias";
         return WithHeader(Chunks(g));
       },
       "unknown tensor 'fc9.bias'"},
      {"WrongShape",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g[0].spec.shape = {6, 8};  // same size, wrong shape
         return WithHeader(Chunks(g));
       },
       "has shape [6x8], expected [8x6]"},
      {"WrongSize",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g[1] = Filled("fc1.bias", {9}, 0.f, 1.f);
         return WithHeader(Chunks(g));
       },
       "has shape [9], expected [8]"},
      {"WrongDtype",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         // int64 with the same byte count as the float tensor would have.
         NamedTensor t = NamedTensor::Zeros({"fc1.bias", {8}, DType::kInt64});
         g[1] = t;
         return WithHeader(Chunks(g));
       },
       "dtype int64, expected float32"},
      {"NaN",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g[2].floats()[3] = std::nanf("");
         return WithHeader(Chunks(g));
       },
       "tensor 'fc2.weight' holds nan"},
      {"Inf",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g[5].floats()[0] = -INFINITY;
         return WithHeader(Chunks(g));
       },
       "tensor 'bn.running_var' holds -inf"},
      {"VersionFromTheFuture",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         return WithHeader(Chunks(g), /*version=*/6);
       },
       "version from the future"},
      {"OversizedChunkStream",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         auto m = WithHeader(Chunks(g));
         // More bytes for the first tensor than its shape holds.
         m[1].mutable_chunk()->mutable_data()->append(64, '\0');
         return m;
       },
       "256 bytes sent, shape [8x6] holds 192"},
      {"ExtraTensorBeyondThePartition",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g.push_back(g[0]);
         return WithHeader(Chunks(g));
       },
       "exceeds the limit"},
      {"TruncatedChunkStream",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         auto m = WithHeader(Chunks(g, /*chunk_bytes=*/64));  // fc1.weight: 192 bytes, 3 chunks
         m.erase(m.begin() + 3, m.end());                     // stop after 2 of its chunks
         return m;
       },
       "'fc1.weight' truncated: got 128 of 192 bytes"},
      {"MissingTensor",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         g.pop_back();
         return WithHeader(Chunks(g));
       },
       "push lacks tensor 'bn.running_var'"},
      {"ChunkAtWrongOffset",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         auto m = WithHeader(Chunks(g, 64));
         m[2].mutable_chunk()->set_offset(128);
         return m;
       },
       "chunk at offset 128, expected 64"},
      {"NoHeader", [](const SmallModel&, std::vector<NamedTensor> g) { return Chunks(g); },
       "must start with a PushHeader"},
      {"NaNLearningRate",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         auto m = WithHeader(Chunks(g));
         m[0].mutable_header()->set_lr(std::nan(""));
         return m;
       },
       "learning rate nan is not a number >= 0"},
      {"NegativeLearningRate",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         auto m = WithHeader(Chunks(g));
         m[0].mutable_header()->set_lr(-0.1);
         return m;
       },
       "learning rate -0.1 is not a number >= 0"},
      {"UnknownWorker",
       [](const SmallModel&, std::vector<NamedTensor> g) {
         return WithHeader(Chunks(g), 5, /*worker=*/7);
       },
       "push from worker 7"},
  };
}

class BadPushTest : public PsServerTest, public ::testing::WithParamInterface<BadPush> {};

TEST_P(BadPushTest, IsRefusedChangesNothingAndOthersAreStillServed) {
  auto ps = LaunchLoaded(/*workers=*/2);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const Pulled before = RawPull(*stub);
  ASSERT_TRUE(before.status.ok());

  const auto bad = GetParam().build(model_, Gradients(0.5f));
  for (bool push_pull : {false, true}) {
    SCOPED_TRACE(push_pull ? "PushPull" : "Push");
    grpc::Status status = push_pull ? RawPushPull(*stub, bad).status : RawPush(*stub, bad);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find(GetParam().message), std::string::npos)
        << status.error_message();
  }
  const Pulled unchanged = RawPull(*stub);
  ASSERT_TRUE(unchanged.status.ok());
  EXPECT_EQ(unchanged.version, before.version);
  ExpectSameModel(before, unchanged);
  v1::ServerStatus s = GetStatus(*stub);
  EXPECT_EQ(s.pushes(), 0);
  EXPECT_EQ(s.rejected_pushes(), 2);
  EXPECT_EQ(s.samples(), 0);

  // Another worker is still served, from the untouched model.
  Pulled good = RawPushPull(*stub, PushOf(1, 5, Gradients(0.5f)));
  ASSERT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.version, 6);
}

INSTANTIATE_TEST_SUITE_P(Each, BadPushTest, ::testing::ValuesIn(BadPushes()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------

TEST_F(PsServerTest, IdleServerRefusesUntilLoadedThenKeepsOnlyItsPartitionWithMomentum) {
  PsProcessOptions o;
  o.partition = 1;
  o.partitions = 2;
  o.workers = 1;
  o.consistency = "asp";
  auto ps = Launch(o);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  EXPECT_EQ(RawPull(*stub).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(RawPush(*stub, PushOf(0, 0, Gradients(1))).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(GetStatus(*stub).loaded());

  {  // A missing file is refused and changes nothing.
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::CheckpointRequest request;
    request.set_path(dir_ / "nope.ckpt");
    v1::CheckpointReply reply;
    EXPECT_FALSE(stub->LoadCheckpoint(&context, request, &reply).ok());
    EXPECT_FALSE(GetStatus(*stub).loaded());
  }
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::CheckpointRequest request;
  request.set_path(checkpoint_);
  v1::CheckpointReply reply;
  grpc::Status loaded = stub->LoadCheckpoint(&context, request, &reply);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  EXPECT_EQ(reply.version(), 5);

  auto plan = PlanPartitions(model_.Specs(), 2);
  ASSERT_TRUE(plan.ok());
  std::vector<std::string> expected;
  for (const TensorPiece& piece : plan->pieces_of[1]) expected.push_back(piece.spec.name);
  const v1::ServerStatus s = GetStatus(*stub);
  EXPECT_TRUE(s.loaded());
  EXPECT_EQ(std::vector<std::string>(s.tensors().begin(), s.tensors().end()), expected);

  // Push gradients for exactly that partition (whole tensors or pieces of rows): the loaded
  // momentum continues.
  std::vector<NamedTensor> all = Gradients(0.5f), mine;
  for (const TensorPiece& piece : plan->pieces_of[1]) {
    mine.push_back(SlicePiece(all[piece.tensor], piece).value());
  }
  Pulled after = RawPushPull(*stub, PushOf(0, 5, mine));
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  const SgdOptions sgd{0.1f, 0.9f, 0.01f};  // 1 worker: lr scale 1
  for (const TensorPiece& piece : plan->pieces_of[1]) {
    const size_t i = piece.tensor;
    if (i >= model_.params.size()) continue;
    NamedTensor p = model_.params[i], v = model_.momentum[i];
    SgdStep(p.floats(), all[i].floats(), v.floats(), p.spec.numel(), sgd);
    const NamedTensor* got = after.Find(piece.spec.name);
    ASSERT_NE(got, nullptr) << piece.spec.name;
    for (int64_t k = 0; k < piece.spec.numel(); ++k) {
      EXPECT_FLOAT_EQ(got->floats()[k], p.floats()[piece.float_offset + k]);
    }
  }
}

// What `strata` ships is what the server runs: numbers no resolution of this directory's YAML
// would give (3 workers, SSP with staleness 5, a quarter of the lr per push) come back in its
// status, so the server derived none of them itself.
TEST_F(PsServerTest, AServerStartedFromAResolvedJobRunsTheNumbersItWasGiven) {
  auto job = LoadJobSpec(config_);
  ASSERT_TRUE(job.ok()) << job.status();
  job->mutable_cluster()->set_workers(3);
  job->mutable_strategy()->set_consistency(v1::CONSISTENCY_SSP);
  job->mutable_strategy()->set_staleness(5);
  job->mutable_strategy()->set_server_lr_scale(0.25);
  const std::string path = dir_ / "job.resolved.txtpb";
  ASSERT_TRUE(WriteFileAtomic(path, ResolvedJobText(*job)).ok());
  PsProcessOptions o;
  o.job = path;
  o.init_checkpoint = checkpoint_;
  auto ps = Launch(o);
  ASSERT_NE(ps, nullptr);
  auto stub = Connect(ps->address());
  const v1::ServerStatus s = GetStatus(*stub);
  EXPECT_EQ(s.workers(), 3);
  EXPECT_EQ(s.consistency(), v1::CONSISTENCY_SSP);
  EXPECT_EQ(s.staleness(), 5);
  EXPECT_FLOAT_EQ(s.lr(), 0.1f * 0.25f);

  // A resolved job takes no hand-start flag, and a file of another format starts nothing.
  PsProcessOptions twice = o;
  twice.binary = STRATA_PS_BINARY;
  twice.work_dir = dir_.path();
  twice.extra_args = {"--workers", "2"};
  auto refused = PsProcess::Launch(twice);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("--job excludes --workers"),
            std::string::npos)
      << refused.status();
  job->set_format(kResolvedJobFormat + 1);
  const std::string other = dir_ / "other.txtpb";
  ASSERT_TRUE(WriteFileAtomic(other, ResolvedJobText(*job)).ok());
  PsProcessOptions wrong = twice;
  wrong.job = other;
  wrong.extra_args.clear();
  refused = PsProcess::Launch(wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find(other + ": resolved job refused: format"),
            std::string::npos)
      << refused.status();
}

TEST_F(PsServerTest, PartitionCheckpointRoundTripsAndRefusesAnotherPartition) {
  auto ps = LaunchLoaded(/*workers=*/1);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  ASSERT_TRUE(RawPushPull(*stub, PushOf(0, 5, Gradients(0.3f), /*samples=*/600)).status.ok());
  const Pulled before = RawPull(*stub);
  v1::CheckpointReply reply;
  ASSERT_TRUE(SaveCheckpointTo(*stub, dir_ / "saved/ps-0.ckpt", &reply).ok());
  EXPECT_EQ(reply.version(), 6);

  PsProcessOptions o;
  o.workers = 1;
  o.train_examples = 1000;
  o.init_checkpoint = dir_ / "saved/ps-0.ckpt";
  auto restored = Launch(o);
  ASSERT_TRUE(restored);
  auto stub2 = Connect(restored->address());
  const Pulled after = RawPull(*stub2);
  ASSERT_TRUE(after.status.ok());
  EXPECT_EQ(after.version, 6);
  EXPECT_DOUBLE_EQ(after.global_epoch, 0.6);
  ExpectSameModel(before, after);
  // The momentum came back too: the next identical push gives identical weights on both.
  const Pulled a = RawPushPull(*stub, PushOf(0, 6, Gradients(0.2f)));
  const Pulled b = RawPushPull(*stub2, PushOf(0, 6, Gradients(0.2f)));
  ExpectSameModel(a, b);

  o.partition = 1;
  o.partitions = 2;
  PsProcessOptions bad = o;
  bad.binary = STRATA_PS_BINARY;
  bad.work_dir = dir_.path();
  bad.config = config_;
  auto refused = PsProcess::Launch(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("holds partition 0 of 1"),
            std::string::npos)
      << refused.status();
}

// A partition saved by a job that split large tensors into pieces (strategy.ps_split, the
// default) holds pieces; a server of a job that deals out whole tensors refuses it, saying why,
// rather than serve a layout its workers do not have. The same job's server takes it back.
TEST_F(PsServerTest, APartitionSavedWithSplitTensorsLoadsOnlyIntoAJobThatSplitsThem) {
  PsProcessOptions o;
  o.partition = 1;
  o.partitions = 2;
  o.train_examples = 1000;
  o.init_checkpoint = checkpoint_;
  auto ps = Launch(o);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  ASSERT_TRUE(SaveCheckpointTo(*stub, dir_ / "ps-1.ckpt").ok());

  o.init_checkpoint = dir_ / "ps-1.ckpt";
  EXPECT_TRUE(Launch(o)) << "the job that saved it takes it back";
  PsProcessOptions whole = o;
  whole.binary = STRATA_PS_BINARY;
  whole.work_dir = dir_.path();
  whole.config = config_;
  whole.extra_args = {"--run-dir",        dir_.path(), "--set",
                      "strategy.kind=ps", "--set",     "strategy.ps_split=false"};
  auto refused = PsProcess::Launch(whole);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message())
                .find("was cut with large tensors split into pieces; this server's job has "
                      "strategy.ps_split false"),
            std::string::npos)
      << refused.status();
}

TEST_F(PsServerTest, BspAppliesTheAverageOnceEveryWorkerPushed) {
  auto ps = LaunchLoaded(/*workers=*/2, "bsp");
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto g0 = Gradients(0.5f), g1 = Gradients(-0.1f);
  Pulled r0;
  std::atomic<bool> done0{false};
  std::thread worker0([&] {
    r0 = RawPushPull(*stub, PushOf(0, 5, g0));
    done0 = true;
  });
  ASSERT_TRUE(PollUntil([&] { return GetStatus(*stub).pushes() == 1; }));
  // The round cannot close without worker 1: worker 0 is still waiting for its weights.
  EXPECT_FALSE(done0.load());
  EXPECT_EQ(GetStatus(*stub).version(), 5);
  const Pulled r1 = RawPushPull(*stub, PushOf(1, 5, g1));
  worker0.join();
  ASSERT_TRUE(r0.status.ok()) << r0.status.error_message();
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  EXPECT_EQ(r0.version, 6);
  EXPECT_EQ(r1.version, 6);
  ExpectSameModel(r0, r1);
  const SgdOptions sgd{0.1f, 0.9f, 0.01f};  // BSP: the job's lr on the averaged gradient
  for (size_t i = 0; i < model_.params.size(); ++i) {
    NamedTensor p = model_.params[i], v = model_.momentum[i], avg = g0[i];
    for (int64_t k = 0; k < p.spec.numel(); ++k)
      avg.floats()[k] = (g0[i].floats()[k] + g1[i].floats()[k]) * 0.5f;
    SgdStep(p.floats(), avg.floats(), v.floats(), p.spec.numel(), sgd);
    const NamedTensor* got = r0.Find(p.name());
    ASSERT_NE(got, nullptr);
    for (int64_t k = 0; k < p.spec.numel(); ++k) EXPECT_NEAR(got->floats()[k], p.floats()[k], 1e-6);
  }
  for (size_t i = 0; i < model_.buffers.size(); ++i) {
    const size_t j = model_.params.size() + i;
    const NamedTensor* got = r0.Find(model_.buffers[i].name());
    ASSERT_NE(got, nullptr);
    for (int64_t k = 0; k < got->spec.numel(); ++k) {
      EXPECT_FLOAT_EQ(got->floats()[k], (g0[j].floats()[k] + g1[j].floats()[k]) * 0.5f)
          << "BSP averages buffers";
    }
  }
}

// One BSP update per round: pushes of one round that ask for different rates are refused.
TEST_F(PsServerTest, BspRefusesARoundWhosePushesAskForDifferentLearningRates) {
  auto ps = LaunchLoaded(/*workers=*/2, "bsp");
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto g = Gradients(0.5f);
  auto first = PushOf(0, 5, g);
  first[0].mutable_header()->set_lr(0.2);
  Pulled r0;
  std::thread worker0([&] { r0 = RawPushPull(*stub, first); });
  ASSERT_TRUE(PollUntil([&] { return GetStatus(*stub).pushes() == 1; }));
  auto other = PushOf(1, 5, g);
  other[0].mutable_header()->set_lr(0.4);
  const Pulled refused = RawPushPull(*stub, other);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("asks for learning rate 0.4"), std::string::npos)
      << refused.status.error_message();
  EXPECT_EQ(GetStatus(*stub).version(), 5);  // the round is still open, nothing applied
  auto agreeing = PushOf(1, 5, g);
  agreeing[0].mutable_header()->set_lr(0.2);
  const Pulled r1 = RawPushPull(*stub, agreeing);
  worker0.join();
  ASSERT_TRUE(r0.status.ok()) << r0.status.error_message();
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  EXPECT_EQ(r1.version, 6);
  EXPECT_FLOAT_EQ(GetStatus(*stub).lr(), 0.2f);
}

TEST_F(PsServerTest, SspHoldsTheFastWorkerWithinTheStalenessBound) {
  constexpr int kStaleness = 2;
  auto ps = LaunchLoaded(/*workers=*/2, "ssp", kStaleness);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  std::atomic<int> completed{0};
  std::atomic<int64_t> version{5};
  // The clock gap as the test counts it: the fast worker's pushes when its pull returns, minus
  // the slow worker's pushes started by then (at least what the server had counted).
  std::atomic<int64_t> slow_pushes_started{0};
  int64_t max_gap = 0;  // written by the fast thread, read after it joined
  std::thread fast([&] {
    for (int step = 0; step < 6; ++step) {
      Pulled r = RawPushPull(*stub, PushOf(1, version.load(), Gradients(0.01f)));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      max_gap = std::max<int64_t>(max_gap, step + 1 - slow_pushes_started.load());
      version = r.version;
      ++completed;
    }
  });
  // Worker 1 may run `staleness` clocks ahead of worker 0, which has not pushed: its third
  // push is accepted, but the pull after it waits.
  ASSERT_TRUE(PollUntil([&] { return GetStatus(*stub).clocks(1) == kStaleness + 1; }));
  EXPECT_EQ(completed.load(), kStaleness);
  for (int slow_step = 1; slow_step <= 3; ++slow_step) {
    ++slow_pushes_started;
    ASSERT_TRUE(RawPushPull(*stub, PushOf(0, 5, Gradients(0.01f))).status.ok());
    ASSERT_TRUE(
        PollUntil([&] { return GetStatus(*stub).clocks(1) == kStaleness + 1 + slow_step; }));
    EXPECT_EQ(completed.load(), kStaleness + slow_step);
  }
  ++slow_pushes_started;
  ASSERT_TRUE(RawPushPull(*stub, PushOf(0, 5, Gradients(0.01f))).status.ok());
  fast.join();
  EXPECT_EQ(max_gap, kStaleness);  // reached (the first pulls) and never exceeded
  EXPECT_GE(GetStatus(*stub).waited_pulls(), 4);
}

TEST_F(PsServerTest, SspWithAThrottledWorkerNeverExceedsTheBound) {
  constexpr int kStaleness = 1, kWorkers = 3, kSteps = 15;
  auto ps = LaunchLoaded(kWorkers, "ssp", kStaleness);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  // A worker's clock when its pull returns is exactly its own pushes; another worker's is at
  // most the pushes it has started (counted before each push is sent). So the gap the test
  // computes is at most the one the server released the pull at, and must stay within the bound.
  std::atomic<int64_t> pushes_started[kWorkers] = {};
  std::vector<int64_t> max_gap(kWorkers, 0);  // per worker, written by its thread only
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      int64_t version = 5;
      for (int step = 0; step < kSteps; ++step) {
        // Worker 2 is the straggler, made one by events rather than by a sleep that a loaded
        // machine may not honour: before each push it waits until both fast workers have started
        // the push SSP must hold (its own pushes so far plus kStaleness plus one), so the bound
        // is reached at every step whatever the scheduling. (A server that held the fast workers
        // one push early would never let them get there: the wait's deadline fails the test.)
        if (w == 2) {
          const int64_t held = std::min<int64_t>(step + 1 + kStaleness, kSteps);
          if (!PollUntil([&] {
                return pushes_started[0].load() >= held && pushes_started[1].load() >= held;
              })) {
            ++failures;
            return;
          }
        }
        ++pushes_started[w];
        Pulled r = RawPushPull(*stub, PushOf(w, version, Gradients(0.001f)));
        if (!r.status.ok()) {
          ++failures;
          return;
        }
        int64_t slowest = step + 1;
        for (const auto& started : pushes_started) slowest = std::min(slowest, started.load());
        max_gap[w] = std::max(max_gap[w], step + 1 - slowest);
        version = r.version;
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(GetStatus(*stub).pushes(), kWorkers * kSteps);
  for (int w = 0; w < kWorkers; ++w) EXPECT_LE(max_gap[w], kStaleness) << "worker " << w;
  // The fast workers ran into the bound (the straggler waited for them to), and were held there.
  // (With the server launched at staleness 2 against the test's 1, workers 0 and 1 reached a gap
  // of 2 and the test failed.)
  EXPECT_EQ(max_gap[0], kStaleness);
  EXPECT_EQ(max_gap[1], kStaleness);
  EXPECT_GE(GetStatus(*stub).waited_pulls(), 1);
}

TEST_F(PsServerTest, WatchProgressReportsEpochBoundaries) {
  auto ps = LaunchLoaded(/*workers=*/1, "asp", -1, /*train_examples=*/10);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  auto watch = stub->WatchProgress(&context, v1::WatchProgressRequest());
  v1::Progress p;
  ASSERT_TRUE(watch->Read(&p));
  EXPECT_EQ(p.completed_epochs(), 0);
  int64_t version = 5;
  for (int i = 0; i < 4; ++i) {  // 4 pushes of 5 samples: epochs end after pushes 2 and 4
    Pulled r = RawPushPull(*stub, PushOf(0, version, Gradients(0.01f), /*samples=*/5));
    ASSERT_TRUE(r.status.ok());
    version = r.version;
  }
  ASSERT_TRUE(watch->Read(&p));
  EXPECT_GE(p.completed_epochs(), 1);
  if (p.completed_epochs() == 1) {
    ASSERT_TRUE(watch->Read(&p));
  }
  EXPECT_EQ(p.completed_epochs(), 2);
  EXPECT_EQ(p.samples(), 20);
  EXPECT_DOUBLE_EQ(p.global_epoch(), 2.0);
  context.TryCancel();
}

TEST_F(PsServerTest, SavesItsPartitionEveryEpoch) {
  PsProcessOptions o;
  o.workers = 1;
  o.train_examples = 10;
  o.init_checkpoint = checkpoint_;
  o.extra_args = {"--run-dir", dir_.path(), "--checkpoint-every-epochs", "1"};
  auto ps = Launch(o);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const std::string path = dir_ / "checkpoints/ps-0.ckpt";
  Pulled r = RawPushPull(*stub, PushOf(0, 5, Gradients(0.1f), /*samples=*/5));
  ASSERT_TRUE(r.status.ok());
  r = RawPushPull(*stub, PushOf(0, r.version, Gradients(0.1f), /*samples=*/5));  // epoch 1 complete
  ASSERT_TRUE(r.status.ok());
  ASSERT_TRUE(PollUntil([&] {
    auto c = ReadCheckpoint(path);
    return c.ok() && c->version == 7;
  })) << "no checkpoint after the first epoch";
  auto saved = ReadCheckpoint(path);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->epoch, 1);
  EXPECT_EQ(saved->extra.value("samples", 0), 10);
  const CheckpointEntry* w = saved->Find(TensorKind::kParameter, "fc1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->tensor.data, r.Find("fc1.weight")->data);
}

TEST_F(PsServerTest, StopEndsTheProcessAndReleasesWaitingPulls) {
  auto ps = LaunchLoaded(/*workers=*/2, "bsp");
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  Pulled waiting;
  std::thread worker0([&] { waiting = RawPushPull(*stub, PushOf(0, 5, Gradients(0.5f))); });
  ASSERT_TRUE(PollUntil([&] { return GetStatus(*stub).pushes() == 1; }));
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::StopRequest request;
  request.set_reason("test");
  v1::StopReply reply;
  EXPECT_TRUE(stub->Stop(&context, request, &reply).ok());
  worker0.join();
  EXPECT_FALSE(waiting.status.ok());
  auto code = ps->WaitForExit(std::chrono::seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

// A process whose state is missing or zombie has exited.
bool Exited(pid_t pid) {
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return true;
  const size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

TEST_F(PsServerTest, ExitsWhenItsParentDies) {
  // The parent is a shell that waits on its stdin; closing the pipe ends the shell.
  const std::string port_file = dir_ / "orphan.port", pid_file = dir_ / "orphan.pid";
  const std::string command =
      absl::StrCat(STRATA_PS_BINARY, " --listen 127.0.0.1:0 --port-file ", port_file,
                   " --partition 0 --partitions 1", " --workers 1 --train-examples 10 --config ",
                   config_, " --init-checkpoint ", checkpoint_, " > ", dir_ / "orphan.log",
                   " 2>&1 & echo $! > ", pid_file, "; read ignored");
  // popen passes on this process's environment: put the run token (the one Connect's channel
  // carries) there, not on the shell's command line.
  ASSERT_EQ(::setenv(kRunTokenEnv, CurrentRpcAuth().token.c_str(), 1), 0);
  FILE* shell = popen(command.c_str(), "w");
  ASSERT_NE(shell, nullptr);
  int port = 0;
  ASSERT_TRUE(PollUntil([&] {
    auto text = ReadFile(port_file);
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0;
  }));
  pid_t pid = 0;
  ASSERT_TRUE(PollUntil([&] {
    auto text = ReadFile(pid_file);
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) && pid > 0;
  }));
  auto stub = Connect(absl::StrCat("127.0.0.1:", port));
  EXPECT_TRUE(GetStatus(*stub).loaded());
  EXPECT_FALSE(Exited(pid));
  pclose(shell);  // the shell reads EOF and exits: strata-ps loses its parent
  const bool exited = PollUntil([&] { return Exited(pid); });
  if (!exited) ::kill(pid, SIGKILL);
  EXPECT_TRUE(exited) << "strata-ps outlived its parent";
  if (getenv("PS_TEST_SHOW_LOG")) std::printf("%s\n", ReadFile(dir_ / "orphan.log")->c_str());
}

}  // namespace
}  // namespace strata::testing
